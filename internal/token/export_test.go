package token

import "github.com/lockd/lockd/internal/wechat"

// IdentityOf exposes identity to the package's external tests, which name
// Redis keys with it.
func IdentityOf(cfg wechat.Config) string { return identity(cfg) }
