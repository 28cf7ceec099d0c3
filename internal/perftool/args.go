package perftool

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUsage is wrapped by every error ParseArgs returns.
var ErrUsage = errors.New("bad command line")

// Option is one flag of a getopt-style command line (perftest's syntax):
// a one-letter name used as -x, a set of long names used as --name (or
// -name, the Go style), and what to do with it.
type Option struct {
	// Short is the one-letter name, 0 for none.
	Short byte
	// Long are the long names, without dashes.
	Long []string
	// Value says the flag takes a value: -x V, -xV, --name V, --name=V.
	// Without it the flag takes none and --name=V is refused.
	Value bool
	// Refuse, when not empty, is why the flag is not accepted; ParseArgs
	// fails with it, naming the flag.
	Refuse string
	// Set is called with the flag as written and its value ("" for a flag
	// without one); an error fails the parse, naming the flag.
	Set func(name, value string) error
}

// ParseArgs parses args against opts the way getopt_long does for
// perftest: short flags alone (-a), clustered (-aF) or with a value
// attached or following (-s8, -s 8); long flags with --name, --name=value
// or --name value, and with one dash too (-size 8); positional arguments
// anywhere; "--" ends the flags. It returns the positional arguments. An
// unknown flag, a missing or unexpected value, a refused flag or a value
// Set refuses is an error wrapping ErrUsage that names the flag.
func ParseArgs(args []string, opts []Option) ([]string, error) {
	short := map[byte]*Option{}
	long := map[string]*Option{}
	for i := range opts {
		o := &opts[i]
		if o.Short != 0 {
			short[o.Short] = o
		}
		for _, l := range o.Long {
			long[l] = o
		}
	}
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(pos, args[i+1:]...), nil
		case len(a) < 2 || a[0] != '-':
			pos = append(pos, a)
			continue
		}
		// next takes the following argument as the value of flag.
		next := func(flag string) (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%w: %s needs a value", ErrUsage, flag)
			}
			i++
			return args[i], nil
		}
		body := strings.TrimPrefix(a, "-")
		dashes := "-"
		if strings.HasPrefix(body, "-") {
			body, dashes = body[1:], "--"
		}
		name, value, hasValue := strings.Cut(body, "=")
		if o, ok := long[name]; ok && (dashes == "--" || len(name) > 1) {
			flag := dashes + name
			if !o.Value && hasValue {
				return nil, fmt.Errorf("%w: %s takes no value (got %q)", ErrUsage, flag, value)
			}
			if o.Value && !hasValue {
				v, err := next(flag)
				if err != nil {
					return nil, err
				}
				value = v
			}
			if err := apply(o, flag, value); err != nil {
				return nil, err
			}
			continue
		}
		if dashes == "--" {
			return nil, fmt.Errorf("%w: unknown flag --%s", ErrUsage, name)
		}
		// A cluster of one-letter flags; one that takes a value takes the
		// rest of the argument, or the next one.
		for k := 0; k < len(body); k++ {
			flag := "-" + body[k:k+1]
			o, ok := short[body[k]]
			if !ok {
				if k == 0 && len(body) > 1 {
					return nil, fmt.Errorf("%w: unknown flag -%s", ErrUsage, body)
				}
				return nil, fmt.Errorf("%w: unknown flag %s", ErrUsage, flag)
			}
			v := ""
			if o.Value {
				if k+1 < len(body) {
					v = strings.TrimPrefix(body[k+1:], "=")
				} else {
					var err error
					if v, err = next(flag); err != nil {
						return nil, err
					}
				}
				k = len(body)
			}
			if err := apply(o, flag, v); err != nil {
				return nil, err
			}
		}
	}
	return pos, nil
}

// apply refuses o or hands it its value.
func apply(o *Option, flag, value string) error {
	if o.Refuse != "" {
		return fmt.Errorf("%w: %s %s", ErrUsage, flag, o.Refuse)
	}
	if o.Set == nil {
		return nil
	}
	if err := o.Set(flag, value); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUsage, flag, err)
	}
	return nil
}
