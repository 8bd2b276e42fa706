package token

import "github.com/lockd/lockd/internal/upstream"

// HeardVersion returns the newest version of app's access_token (kind "")
// or ticket of kind that b read, stored or heard of through a notice.
func HeardVersion(b *Broker, app string, kind upstream.TicketType) int64 {
	a := b.apps[app]
	v := a.token
	if kind != "" {
		v = a.tickets[kind]
	}
	return v.knownVersion()
}
