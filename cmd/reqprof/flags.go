package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// inputError is an error in what reqprof was given, or in where it runs,
// that the user must fix: reqprof exits 2 on it, 1 on a failure while
// profiling.
type inputError struct{ error }

func (e inputError) Unwrap() error { return e.error }

// badInput is an inputError saying what format says.
func badInput(format string, args ...any) error {
	return inputError{fmt.Errorf(format, args...)}
}

// command is one command's flags, kept in the order they were defined so
// that its help lists them in that order, with what its help says above
// them.
type command struct {
	*flag.FlagSet
	synopsis string // "reqprof attach --pid PID[=LABEL] [--pid ...] [flags]"
	about    string // a paragraph on what the command does
	order    []string
}

// newCommand is a command whose flag package prints nothing: parse
// reports errors, and --help, as the rest of reqprof does.
func newCommand(name, synopsis, about string) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &command{FlagSet: fs, synopsis: synopsis, about: about}
}

// Var and the other definers below are the flag package's, noting each
// flag's place in the help.
func (c *command) Var(value flag.Value, name, usage string) {
	c.FlagSet.Var(value, name, usage)
	c.order = append(c.order, name)
}

func (c *command) StringVar(p *string, name, value, usage string) {
	c.FlagSet.StringVar(p, name, value, usage)
	c.order = append(c.order, name)
}

func (c *command) IntVar(p *int, name string, value int, usage string) {
	c.FlagSet.IntVar(p, name, value, usage)
	c.order = append(c.order, name)
}

func (c *command) BoolVar(p *bool, name string, value bool, usage string) {
	c.FlagSet.BoolVar(p, name, value, usage)
	c.order = append(c.order, name)
}

func (c *command) DurationVar(p *time.Duration, name string, value time.Duration, usage string) {
	c.FlagSet.DurationVar(p, name, value, usage)
	c.order = append(c.order, name)
}

func (c *command) String(name, value, usage string) *string {
	p := new(string)
	c.StringVar(p, name, value, usage)
	return p
}

func (c *command) Int(name string, value int, usage string) *int {
	p := new(int)
	c.IntVar(p, name, value, usage)
	return p
}

func (c *command) Bool(name string, value bool, usage string) *bool {
	p := new(bool)
	c.BoolVar(p, name, value, usage)
	return p
}

// parse parses args. On --help it writes the help to stdout and returns
// flag.ErrHelp; a bad flag is an inputError of one line.
func (c *command) parse(args []string, stdout io.Writer) error {
	return c.checkParse(c.Parse(args), stdout)
}

// checkParse turns what the flag package's Parse returned into parse's
// error.
func (c *command) checkParse(err error, stdout io.Writer) error {
	if errors.Is(err, flag.ErrHelp) {
		c.writeHelp(stdout)
		return err
	}
	if err != nil {
		return inputError{flagError(c.FlagSet, err)}
	}
	return nil
}

// helpWidth is the width the help is wrapped to, and helpNameWidth that of
// its column of flags; a longer flag has its text on the next line.
const (
	helpWidth     = 80
	helpNameWidth = 26
)

// writeHelp writes the command's synopsis, what it does, and each of its
// flags as --flag VALUE, its text, and its default when it has one.
func (c *command) writeHelp(w io.Writer) {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n", c.synopsis)
	if c.about != "" {
		b.WriteString("\n" + wrap(c.about, 0, helpWidth) + "\n")
	}
	if len(c.order) > 0 {
		b.WriteString("\nflags:\n")
	}
	for _, name := range c.order {
		f := c.Lookup(name)
		valueName, usage := helpOf(f)
		head := "  --" + name
		if valueName != "" {
			head += " " + valueName
		}
		if f.DefValue != "" && f.DefValue != "false" {
			usage += " (default " + f.DefValue + ")"
		}
		if len(head) > helpNameWidth-2 {
			b.WriteString(head + "\n" + wrap(usage, helpNameWidth, helpWidth) + "\n")
			continue
		}
		text := wrap(usage, helpNameWidth, helpWidth)
		b.WriteString(head + text[len(head):] + "\n")
	}
	io.WriteString(w, b.String())
}

// helpOf is what f's help shows: the name of its value and its text. A
// usage that starts with a word in backquotes names the value with it
// ("`PID[=LABEL]` process to profile"); else the value is named by its
// type, as the flag package does, and a bool flag takes none.
func helpOf(f *flag.Flag) (valueName, text string) {
	if rest, ok := strings.CutPrefix(f.Usage, "`"); ok {
		if name, text, ok := strings.Cut(rest, "`"); ok {
			return name, strings.TrimSpace(text)
		}
	}
	return flag.UnquoteUsage(f)
}

// wrap fills text into lines of at most width, each indented by indent.
func wrap(text string, indent, width int) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && indent+len([]rune(line))+1+len([]rune(word)) > width {
			lines = append(lines, strings.Repeat(" ", indent)+line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return strings.Join(append(lines, strings.Repeat(" ", indent)+line), "\n")
}

// The flag package's parse errors, which name flags with one dash.
var (
	undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	invalidValue  = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-+([^:]+): (.*)$`)
	missingValue  = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
)

// flagError says in one line, naming flags as --flag, what was wrong
// with the flags fs failed to parse with err.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if m := undefinedFlag.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("unknown flag --%s (reqprof %s --help lists them)", m[1], fs.Name())
	}
	if m := missingValue.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("--%s needs a value", m[1])
	}
	if m := invalidValue.FindStringSubmatch(msg); m != nil {
		value, _ := strconv.Unquote(m[1])
		return fmt.Errorf("--%s %q: %s", m[2], value, valueProblem(fs.Lookup(m[2]), m[3]))
	}
	return errors.New(strings.Replace(msg, " -", " --", 1))
}

// valueProblem says what is wrong with a value f was given, where the flag
// package said only "parse error".
func valueProblem(f *flag.Flag, said string) string {
	if said != "parse error" || f == nil {
		return said
	}
	getter, ok := f.Value.(flag.Getter)
	if !ok {
		return said
	}
	switch getter.Get().(type) {
	case time.Duration:
		return "not a duration, such as 10s or 500ms"
	case bool:
		return "want true or false"
	case int, int64, uint, uint64:
		return "not a whole number"
	case float64:
		return "not a number"
	}
	return said
}
