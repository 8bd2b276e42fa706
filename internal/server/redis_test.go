package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// TestRedisErrorsDoNotShowThePassword gives --redis values with a password
// that do not parse: the errors say what is wrong without showing it.
func TestRedisErrorsDoNotShowThePassword(t *testing.T) {
	t.Parallel()
	const pw = "Sup3rS3cretPassw0rd"
	for _, tc := range []struct{ name, spec, want string }{
		{"a malformed escape in the password", "redis://user:" + pw + "%zz@127.0.0.1:6379", "not a valid URL"},
		{"a bad port after a password", "redis://:" + pw + "@127.0.0.1:port", "not a valid URL"},
		{"a bad database after a password", "redis://:" + pw + "@127.0.0.1:6379/db", "invalid database"},
		{"an unknown scheme with a password", "http://:" + pw + "@127.0.0.1:6379", "scheme"},
		{"user info without a scheme", "user:" + pw + "@127.0.0.1:6379", "user info"},
		{"a password pasted as an address", pw, "entry 1 of 1 is not host:port"},
		{"a password pasted among addresses", "127.0.0.1:7000," + pw, "entry 2 of 2 is not host:port"},
	} {
		_, err := NewRedisClient(tc.spec, false, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), pw[:8])) {
			t.Errorf("%s: %q shows the password", tc.name, err)
		}
	}
}

// TestRedisPasswordFromAFile runs lockd on a Redis that wants a password,
// given in --redis-password-file rather than in the URL.
func TestRedisPasswordFromAFile(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const pw = "redis-file-password-0123"
	if err := srv.Client(t).ConfigSet(ctx, "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "redis.password")
	if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := start(t, Config{Redis: "redis://" + srv.Addr(), RedisPasswordFile: file})
	res, err := lockdv1.NewLockServiceClient(r.conn).Acquire(ctx, &lockdv1.AcquireRequest{Key: "pw"})
	if err != nil || !res.GetAcquired() {
		t.Fatalf("Acquire with the password from a file: %v, %v", res, err)
	}
	without := start(t, Config{Redis: "redis://" + srv.Addr()})
	if _, err := lockdv1.NewLockServiceClient(without.conn).Acquire(ctx, &lockdv1.AcquireRequest{Key: "pw"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Acquire without the password: %v, want UNAVAILABLE\n%s", err, without.logs)
	}
	if strings.Contains(r.logs.String(), pw) || strings.Contains(without.logs.String(), pw) {
		t.Fatal("the password reached the logs")
	}

	for _, tc := range []struct {
		name, password, file, spec, want string
	}{
		{"a password in the URL and a file", "", file, "redis://:x@" + srv.Addr(), "give it once"},
		{"a password in the environment and a file", "p", file, srv.Addr(), "give the password once"},
		{"a missing file", "", filepath.Join(t.TempDir(), "none"), srv.Addr(), "--redis-password-file"},
	} {
		pw, err := redisPassword(tc.password, tc.file)
		if err == nil {
			_, err = newRedisClient(tc.spec, false, "", pw, nil)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestRedisPasswordFileErrorsDoNotShowThePath: --redis-password-file may
// have been given the password itself; whatever is wrong with the file,
// the error names the flag and never the path.
func TestRedisPasswordFileErrorsDoNotShowThePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "Sup3rS3cretPassw0rd-empty")
	long := filepath.Join(dir, "Sup3rS3cretPassw0rd-long")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(long, []byte(strings.Repeat("p", 64<<10+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"the password pasted as the file", "Sup3rS3cretPassw0rd", "cannot be read"},
		{"an empty file", empty, "is empty"},
		{"a file too long", long, "longer than"},
		{"a directory", dir, "cannot be read"},
	} {
		_, err := redisPassword("", tc.file)
		if err == nil || !strings.Contains(err.Error(), "--redis-password-file") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error of --redis-password-file that says %q", tc.name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "Sup3rS3cretPassw0rd") || strings.Contains(err.Error(), dir) {
			t.Errorf("%s: %q shows the path", tc.name, err)
		}
	}
}
