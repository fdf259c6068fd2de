package main

import "strings"

// getopt is a small GNU getopt: short options from an optstring (a letter,
// followed by ':' if it takes an argument), clustering (-vV), arguments
// attached (-p7174) or in the next word (-p 7174, even if that word starts
// with '-'), "--" ending the options, and non-options permuted out of the
// way unless POSIXLY_CORRECT is set (they are ignored, as rping ignores
// them). Words starting with "--" are long options, matched exactly or by
// an unambiguous prefix, with "--name=value" or "--name value". rping's
// own getopt has no long options: everything long here is an extension.
// As with opterr = 0, errors print nothing; they come back as '?'.
type getopt struct {
	args      []string
	shorts    string
	longs     []longOpt
	permute   bool
	idx       int    // next word
	cluster   string // rest of the short-option word being taken apart
	Nonoption []string
}

// longOpt is one long option: its name and whether it takes an argument.
type longOpt struct {
	name   string
	hasArg bool
}

// option is one result of next: c is the option letter ('?' for an
// unknown option or a missing argument, 0 for a long option), long its
// long name, arg its argument, bad the offending word or letter.
type option struct {
	c    byte
	long string
	arg  string
	bad  string
}

func newGetopt(args []string, shorts string, longs []longOpt, posixlyCorrect bool) *getopt {
	return &getopt{args: args, shorts: shorts, longs: longs, permute: !posixlyCorrect}
}

// next returns the next option, or ok false when the options are done.
func (g *getopt) next() (o option, ok bool) {
	for g.cluster == "" {
		if g.idx >= len(g.args) {
			return option{}, false
		}
		a := g.args[g.idx]
		switch {
		case a == "--":
			g.idx++
			g.Nonoption = append(g.Nonoption, g.args[g.idx:]...)
			g.idx = len(g.args)
			return option{}, false
		case len(a) < 2 || a[0] != '-':
			if !g.permute {
				g.Nonoption = append(g.Nonoption, g.args[g.idx:]...)
				g.idx = len(g.args)
				return option{}, false
			}
			g.Nonoption = append(g.Nonoption, a)
			g.idx++
		case strings.HasPrefix(a, "--"):
			g.idx++
			return g.long(a[2:]), true
		default:
			g.cluster = a[1:]
			g.idx++
		}
	}
	c := g.cluster[0]
	g.cluster = g.cluster[1:]
	i := strings.IndexByte(g.shorts, c)
	if c == ':' || i < 0 {
		return option{c: '?', bad: string(c)}, true
	}
	if i+1 < len(g.shorts) && g.shorts[i+1] == ':' {
		switch {
		case g.cluster != "":
			o = option{c: c, arg: g.cluster}
			g.cluster = ""
		case g.idx < len(g.args):
			o = option{c: c, arg: g.args[g.idx]}
			g.idx++
		default:
			return option{c: '?', bad: string(c)}, true
		}
		return o, true
	}
	return option{c: c}, true
}

// long resolves "name" or "name=value".
func (g *getopt) long(word string) option {
	name, val, hasVal := strings.Cut(word, "=")
	var match *longOpt
	for i := range g.longs {
		l := &g.longs[i]
		if l.name == name {
			match = l
			break
		}
		if strings.HasPrefix(l.name, name) {
			if match != nil {
				return option{c: '?', bad: "--" + name} // ambiguous
			}
			match = l
		}
	}
	if match == nil || name == "" {
		return option{c: '?', bad: "--" + name}
	}
	o := option{long: match.name}
	switch {
	case match.hasArg && hasVal:
		o.arg = val
	case match.hasArg && g.idx < len(g.args):
		o.arg = g.args[g.idx]
		g.idx++
	case match.hasArg:
		return option{c: '?', bad: "--" + name}
	case hasVal:
		return option{c: '?', bad: "--" + name} // no argument allowed
	}
	return o
}
