package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// flagSet is a flag.FlagSet that reports errors itself, as one line on
// stderr, instead of printing usage and exiting; help goes to stdout.
type flagSet struct {
	*flag.FlagSet
	cmd            string // "serve", "cluster up", ...
	stdout, stderr io.Writer
}

// newFlagSet returns the flag set of one subcommand.
func newFlagSet(name string, stdout, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet("hotcount "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, cmd: name, stdout: stdout, stderr: stderr}
}

// parse parses args. When done is true the caller returns code at once:
// help was asked for (usage, flags and examples on stdout, status 0) or
// the flags were bad (one line on stderr, status 2). Positional arguments
// are refused.
func (fs *flagSet) parse(args []string) (code int, done bool) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.printHelp()
		return exitOK, true
	}
	if err != nil {
		return fs.usagef("%s", typedFlag.ReplaceAllString(err.Error(), "${1}--${2}")), true
	}
	if fs.NArg() > 0 {
		return fs.usagef("unexpected argument %q", fs.Arg(0)), true
	}
	return exitOK, false
}

// typedFlag is a flag named in an error of the flag package, which writes
// one dash ("flag needs an argument: -key"); messages name flags with two,
// as they are typed and as help lists them.
var typedFlag = regexp.MustCompile(`(flag |for |: )-([a-zA-Z0-9][a-zA-Z0-9_.-]*)`)

// printHelp writes the command's summary, flags and examples to stdout.
func (fs *flagSet) printHelp() {
	w := fs.stdout
	if sum, ok := subcommandSummaries[fs.cmd]; ok {
		fmt.Fprintf(w, "%s: %s\n\n", fs.Name(), sum)
	} else if c, ok := commands[strings.Fields(fs.cmd)[0]]; ok {
		fmt.Fprintf(w, "%s: %s\n\n", fs.Name(), c.summary)
	}
	nflags := 0
	fs.VisitAll(func(*flag.Flag) { nflags++ })
	if nflags == 0 {
		// A command without flags (version) shows no empty section.
		fmt.Fprintf(w, "Usage: %s\n", fs.Name())
	} else {
		fmt.Fprintf(w, "Usage: %s [flags]\n\nFlags:\n", fs.Name())
		fs.printFlags(w)
	}
	if ex := commandExamples[fs.cmd]; ex != "" {
		fmt.Fprintf(w, "\nExamples:\n%s", ex)
	}
}

// printFlags writes the flags as they are typed, "--name TYPE", each with
// its usage on the next line (the flag package's PrintDefaults writes
// "-name string"). For serve and proxy, whose settings the flag package
// reads as strings, TYPE is the setting's type in the schema ("duration",
// "int", "text|json", "host:port,...").
func (fs *flagSet) printFlags(w io.Writer) {
	schema := fs.cmd == "serve" || fs.cmd == "proxy"
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		if s := settingOfFlag(f.Name); schema && s != nil {
			typ = flagType(s.typ)
		}
		line := "  --" + f.Name
		if typ != "" {
			line += " " + typ
		}
		switch f.DefValue {
		case "", "0", "false", "0s":
		default:
			if typ == "string" {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				usage += fmt.Sprintf(" (default %v)", f.DefValue)
			}
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
	})
}

// flagType is how help names a schema type after a flag: nothing for a
// bool, "a|b" for "a or b", "x,..." for "list of x".
func flagType(typ string) string {
	if typ == "bool" {
		return ""
	}
	if rest, ok := strings.CutPrefix(typ, "list of "); ok {
		return rest + ",..."
	}
	return strings.ReplaceAll(typ, " or ", "|")
}

// usagef prints "hotcount: <command>: <message>" on stderr and returns
// exitUsage.
func (fs *flagSet) usagef(format string, args ...any) int {
	return usagef(fs.stderr, "%s: %s", fs.cmd, fmt.Sprintf(format, args...))
}

// failf prints "hotcount: <command>: <message>" on stderr and returns
// exitFailure.
func (fs *flagSet) failf(format string, args ...any) int {
	return failf(fs.stderr, "%s: %s", fs.cmd, fmt.Sprintf(format, args...))
}

// usagef prints a one-line usage error and returns exitUsage. Every
// message names its command first: "hotcount: <command>: ...".
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

// checkOutputFile reports why path could not be written as a command's
// output file, before the command does its work: a file that exists must
// open for writing (a folder does not), and one that does not must be
// creatable (it is created and removed again). A bad output path is then
// a usage error found before a run, not a failure after it.
func checkOutputFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
			f.Close()
			return os.Remove(path)
		}
	}
	if err != nil {
		return err
	}
	return f.Close()
}
