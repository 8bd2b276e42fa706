package config

import (
	"fmt"
	"strings"

	"github.com/lockd/lockd/internal/safetext"
)

// prefixSeparators are the characters a lock prefix is expected to end
// with, so that it covers a key hierarchy and nothing beside it: "orders/"
// covers "orders/42" but not "orders-archive/42".
const prefixSeparators = "/:.|#"

// prefixWarnings reports lock prefixes that do what they say but likely not
// what was meant: prefixes are matched as plain string prefixes, so
// "billing" also covers every key of a client holding "billing-ledger/".
func prefixWarnings(clients []Client) []string {
	var out []string
	for i, c := range clients {
		for j, p := range c.Locks {
			if p == "" {
				continue
			}
			where := fmt.Sprintf("auth.clients[%d] %q: locks[%d] %s", i, c.Name, j, safetext.Excerpt(p))
			if !strings.ContainsRune(prefixSeparators, rune(p[len(p)-1])) {
				out = append(out, where+": does not end with a separator such as '/', so it also covers keys that merely start with the same letters")
			}
			for _, o := range clients {
				if o.Name == c.Name {
					continue
				}
				for _, q := range o.Locks {
					if q != p && strings.HasPrefix(q, p) {
						out = append(out, fmt.Sprintf("%s: covers client %q's prefix %s, so %q may lock %q's keys", where, o.Name, safetext.Excerpt(q), c.Name, o.Name))
					}
				}
			}
		}
	}
	return out
}
