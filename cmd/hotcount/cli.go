package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// flagSet is a flag.FlagSet that reports errors itself, as one line on
// stderr, instead of printing usage and exiting.
type flagSet struct {
	*flag.FlagSet
	stderr io.Writer
}

// newFlagSet returns the flag set of one subcommand.
func newFlagSet(name string, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet("hotcount "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, stderr: stderr}
}

// parse parses args. When done is true the caller returns code at once:
// help was asked for (flags printed to stderr, status 0) or the flags were
// bad (one line on stderr, status 2). Positional arguments are refused.
func (fs *flagSet) parse(args []string) (code int, done bool) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(fs.stderr)
		fmt.Fprintf(fs.stderr, "Usage of %s:\n", fs.Name())
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		return exitOK, true
	}
	if err != nil {
		fmt.Fprintf(fs.stderr, "%s: %v\n", fs.Name(), err)
		return exitUsage, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return exitUsage, true
	}
	return exitOK, false
}

// usagef prints a one-line usage error and returns exitUsage.
func usagef(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintln(stderr, oneLine(format, args...))
	return exitUsage
}

// failf prints a one-line runtime error and returns exitFailure.
func failf(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintln(stderr, oneLine(format, args...))
	return exitFailure
}

// oneLine formats a message as "hotcount: ...", on one line, without the
// "hotcount: " prefix that wrapped library errors repeat.
func oneLine(format string, args ...any) string {
	m := strings.ReplaceAll(fmt.Sprintf(format, args...), "hotcount: ", "")
	m = strings.ReplaceAll(m, "\n", " ")
	return "hotcount: " + m
}

// splitAddrs splits a comma-separated address list, dropping blanks.
func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
