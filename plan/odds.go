package plan

import "math"

// PAllDistinct returns the probability that n sub-counters whose labels hash
// independently and uniformly onto k nodes all land on different nodes:
//
//	k! / ((k-n)! · k^n) = ∏_{i=0}^{n-1} (1 - i/k)
//
// It is 0 when n > k and 1 when n <= 1. The product is summed in log space
// (log1p) so that large k and n neither overflow nor lose precision.
func PAllDistinct(k, n int) float64 {
	switch {
	case n <= 1:
		return 1
	case k <= 0 || n > k:
		return 0
	}
	var logp float64
	kf := float64(k)
	for i := 1; i < n; i++ {
		logp += math.Log1p(-float64(i) / kf)
	}
	return math.Exp(logp)
}

// ExpectedDistinctNodes returns the expected number of distinct nodes that n
// independently hashed sub-counters occupy on k nodes: k·(1 - (1-1/k)^n).
func ExpectedDistinctNodes(k, n int) float64 {
	if k <= 0 || n <= 0 {
		return 0
	}
	if k == 1 {
		return 1
	}
	kf := float64(k)
	// 1 - (1-1/k)^n = -expm1(n·log1p(-1/k)), exact for large k.
	return kf * -math.Expm1(float64(n)*math.Log1p(-1/kf))
}

// ExpectedCollisions returns n minus the expected number of distinct nodes:
// the expected count of sub-counters that land on a node some other
// sub-counter already occupies (with 8 on 20 nodes, ≈ 1.27). Zero collisions
// means every sub-counter has a node of its own.
func ExpectedCollisions(k, n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64(n) - ExpectedDistinctNodes(k, n)
}

// ExpectedSharedSubCounters returns the expected number of sub-counters that
// share their node with at least one other sub-counter:
// n·(1 - (1-1/k)^(n-1)). It counts both members of a colliding pair, so it
// is at least ExpectedCollisions.
func ExpectedSharedSubCounters(k, n int) float64 {
	if k <= 0 || n <= 1 {
		return 0
	}
	if k == 1 {
		return float64(n)
	}
	return float64(n) * -math.Expm1(float64(n-1)*math.Log1p(-1/float64(k)))
}

// ExpectedMaxLoad returns the expected number of sub-counters on the most
// loaded node when n sub-counters hash independently and uniformly onto k
// nodes (the expected maximum bin count of n balls in k bins).
//
// It is computed exactly, not estimated: E[max] = Σ_{t≥0} (1 - P(max ≤ t)),
// and P(max ≤ t) = n!/k^n · [x^n] (Σ_{j≤t} x^j/j!)^k. To keep every number a
// probability, the generating function is evaluated with Poisson(n/k)
// weights (the Poissonisation identity): P(max ≤ t) = P(S = n, all X_i ≤ t)
// / P(S = n) for X_i i.i.d. Poisson(n/k) and S their sum. The k-th power is
// taken by repeated squaring with polynomials truncated at degree n, so the
// cost is O(n² log k) per term; terms stop once P(max > t) < 1e-12.
func ExpectedMaxLoad(k, n int) float64 {
	switch {
	case n <= 0 || k <= 0:
		return 0
	case k == 1 || n == 1:
		return float64(n)
	}
	lambda := float64(n) / float64(k)
	logPoisson := func(j int, mean float64) float64 {
		lg, _ := math.Lgamma(float64(j) + 1)
		return -mean + float64(j)*math.Log(mean) - lg
	}
	pSumIsN := math.Exp(logPoisson(n, float64(n)))
	lower := (n + k - 1) / k // pigeonhole: max ≥ ceil(n/k)
	e := float64(lower)      // Σ_{t<lower} (1 - 0)
	for t := lower; t < n; t++ {
		q := make([]float64, t+1)
		for j := range q {
			q[j] = math.Exp(logPoisson(j, lambda))
		}
		pow := polyPow(q, k, n)
		pLE := 0.0
		if len(pow) > n {
			pLE = pow[n] / pSumIsN
		}
		pLE = math.Min(1, math.Max(0, pLE))
		tail := 1 - pLE
		e += tail
		if tail < 1e-12 {
			break
		}
	}
	return e
}

// polyPow returns p^k truncated to degree maxDeg.
func polyPow(p []float64, k, maxDeg int) []float64 {
	result := []float64{1}
	base := p
	for k > 0 {
		if k&1 == 1 {
			result = polyMul(result, base, maxDeg)
		}
		k >>= 1
		if k > 0 {
			base = polyMul(base, base, maxDeg)
		}
	}
	return result
}

// polyMul returns a·b truncated to degree maxDeg.
func polyMul(a, b []float64, maxDeg int) []float64 {
	deg := min(len(a)+len(b)-2, maxDeg)
	out := make([]float64, deg+1)
	for i, ai := range a {
		if ai == 0 || i > deg {
			continue
		}
		lim := min(len(b)-1, deg-i)
		row := out[i : i+lim+1]
		for j := range row {
			row[j] += ai * b[j]
		}
	}
	return out
}
