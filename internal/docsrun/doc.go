// Package docsrun holds the tests that keep the documentation true: they
// run the examples the docs show and check the links between the Markdown
// files. It has no code of its own.
//
// TestDocsRun builds the hotcount command and runs, in a fresh folder each,
// the shell blocks of README.md (the Quick start), docs/cli.md and
// docs/proxy.md, and every example of `hotcount --help`, in order:
//
//   - A ```sh block is a list of commands, one a line (a trailing
//     backslash continues it; a "  # comment" after it is dropped). A
//     ```console block holds commands after "$ " and, under each, the
//     output the doc shows; the output must match, with volatile fields
//     (stale_ms) masked.
//   - Every command must exit 0. `hotcount serve` and `hotcount proxy` run
//     until the end of their doc, on free ports: the test waits for them
//     to listen, maps the addresses the doc names (127.0.0.1:7070,
//     127.0.0.1:6380, localhost:7071, redis-cli's -p 6380, ...) to the
//     real ones (and sets HOTCOUNT_SERVER, the counter commands' default
//     server, to serve's), and at the end, or at a line `kill %N` (the
//     doc's Nth background command), stops them with SIGTERM, expecting
//     exit 0. `hotcount cluster up --port P` runs
//     on free ports ("--port 0") in a temporary --dir, and the doc's
//     127.0.0.1:P is mapped to the first seed it prints.
//   - A block preceded by the line `<!-- docs-run: skip: REASON -->` is not
//     run; the reason must be given. Examples of the help that cannot run
//     here (CPU quotas need root and cgroups) are listed with their reason
//     in the test.
//
// TestMarkdownLinks checks every relative link of every Markdown file of
// the repository: the file exists and, for a #fragment, the heading does.
//
// TestGoNamesExist checks the Go names that README.md and docs/ quote in
// code spans (`Config.Redis.FlushDelay`, `proxy.DefaultMaxBulkLen`,
// `ErrOverflow`) against the repository's source: the package has the
// name, the type the field or method, through the fields on the way.
// TestLibraryErrorsListed checks that docs/library.md names every named
// error of the root package. TestMetricNamesExist checks the hotcount_*
// metric names the docs quote against the source's string literals.
//
// TestDocsFlagsExist checks every --flag that follows a hotcount command
// in the docs (`hotcount serve --listen A`, `hotcount cluster up --port
// P`) against that command's --help, a `hotcount WORD --flag` whose WORD
// is no command as an error, and a code span that starts with a flag
// (`--rounds`) against the flags of every command.
// TestCLIGuideHasEveryFlag checks the other way: docs/cli.md's table shows
// every flag of every command but serve and proxy (whose flags are the
// settings of docs/configuration.md) in that command's row, and
// TestCLIGuideDefaults that a value the row shows for an optional flag
// ([--keys 200000]) is the default the command's --help shows.
//
// TestGoBlocksCompile compiles the ```go blocks of README.md and
// docs/library.md against the repository, in a module of their own.
package docsrun
