package token

import (
	"context"
	"errors"
	"time"
)

// watchMaxBackoff bounds the wait between attempts while a watched app's
// token cannot be had.
const watchMaxBackoff = 30 * time.Second

// Watch sends the app's current token to send at once (minting one if
// needed, as Get does) and then every new token as soon as any replica
// stores it, until ctx ends or send fails. A watch is demand: it keeps the
// app from going idle, and when no replica renewed the token by the time
// it needs replacing, the watch gets it as Get would. When no token can be
// had, Watch keeps trying while the last token sent is valid, then returns
// the error. Tokens are sent in the order the fleet stored them: never one
// older than a token already sent, even should Redis come back with older
// data.
func (b *Broker) Watch(ctx context.Context, app string, caller Caller, send func(Token) error) error {
	a, err := b.app(app)
	if err != nil {
		return err
	}
	v := a.token
	get := want{cause: CauseDemand, caller: caller}
	tok, err := v.join(ctx, get)
	if err != nil {
		return err
	}
	if err := send(tok); err != nil {
		return err
	}
	last := tok
	failures := 0
	touch := max(min(b.opts.IdleAfter/10, time.Minute), time.Second)
	for {
		notice := v.sig.await()
		wait := touch
		st, err := v.read(ctx, true, "")
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err == nil && v.servable(st):
			if st.token != last.AccessToken && newer(st.ver, last.ver) {
				last = st.result()
				if err := send(last); err != nil {
					return err
				}
			}
			failures = 0
			wait = min(wait, v.replaceIn(st))
		case err == nil || time.Until(last.ExpireTime) <= 0:
			// The token needs replacing and no replica has: get it as a
			// caller would (waiting for a mint under way, or minting).
			tok, err := v.join(ctx, get)
			if err == nil {
				failures = 0
				if tok.AccessToken != last.AccessToken && newer(tok.ver, last.ver) {
					last = tok
					if err := send(tok); err != nil {
						return err
					}
				}
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Until(last.ExpireTime) <= 0 {
				return err
			}
			failures++
			wait = min(time.Second<<min(failures-1, 5), watchMaxBackoff, time.Until(last.ExpireTime))
			b.log.Warn("token: watch cannot get a new token yet", "app", app, "client", caller.String(), "err", err)
		default:
			// Redis cannot be read; the last token sent is still valid.
			wait = min(wait, time.Second, time.Until(last.ExpireTime))
		}
		if err := v.sleep(ctx, notice, wait); err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return err
			}
		}
	}
}

// newer reports whether a value of version ver may follow one of version
// last in a watch: never an older one (Redis came back with older data),
// whatever its token; 0 is a version not known.
func newer(ver, last int64) bool { return ver == 0 || last == 0 || ver > last }

// replaceIn is how long until the cached value stops being servable and a
// watch must see to its replacement.
func (v *value) replaceIn(st state) time.Duration {
	left := st.left()
	if st.fresherIn() > 0 || st.failure != nil {
		return max(left-v.b.minMargin(st.lifetime), time.Millisecond) + time.Millisecond
	}
	return max(left-v.b.margin(st.lifetime), time.Millisecond) + time.Millisecond
}
