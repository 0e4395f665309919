package hotcount_test

func clusterBackends() []backend { return nil }
