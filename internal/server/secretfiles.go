package server

import (
	"log/slog"

	"github.com/lockd/lockd/internal/config"
)

// secretFlags are the files named by flags that hold secrets; the config
// file's token_file and secret_file are checked as it is parsed.
type secretFlags []struct{ flag, path string }

func secretFlagsOf(cfg Config) secretFlags {
	return secretFlags{
		{"--redis-password-file", cfg.RedisPasswordFile},
		{"--tls-key", cfg.TLS.Key},
	}
}

// warn logs each of the files that group or others may read; at start-up
// and on each reload, so a fix is seen without a restart.
func (s secretFlags) warn(log *slog.Logger) {
	for _, f := range s {
		if f.path == "" {
			continue
		}
		if perm, open := config.OpenToOthers(f.path); open {
			log.Warn(f.flag + ": " + config.OpenToOthersWarning(f.path, perm))
		}
	}
}
