package wechatlockd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/silenceper/wechat/v2"
	"github.com/silenceper/wechat/v2/cache"
	offConfig "github.com/silenceper/wechat/v2/officialaccount/config"
	"github.com/silenceper/wechat/v2/util"

	"github.com/lockd/lockd/client"
)

// TestTheSDKCallsWeChatWithLockdsToken runs the SDK against the fake
// WeChat upstream with its access-token handle fed by a lockd process: the
// SDK's API calls carry lockd's token, and the upstream sees exactly one
// token request, lockd's.
func TestTheSDKCallsWeChatWithLockdsToken(t *testing.T) {
	fakeAddr := freeAddr(t)
	start(t, "WECHAT_FAKE_BIN", "./cmd/wechat-fake", fakeAddr, nil, "--listen="+fakeAddr, "--app", "wx-demo:app-secret")
	config := filepath.Join(t.TempDir(), "lockd.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(
		"apps:\n  - {name: mp, provider: wechat, appid: wx-demo, secret_env: MP_SECRET, api_base: \"http://%s\"}\n", fakeAddr)), 0o600); err != nil {
		t.Fatal(err)
	}
	lockdAddr := freeAddr(t)
	start(t, "LOCKD_BIN", "./cmd/lockd", lockdAddr, []string{"MP_SECRET=app-secret"},
		"--listen="+lockdAddr, "--http-listen="+freeAddr(t), "--config="+config)

	c, err := client.New([]string{lockdAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	// The SDK calls https://api.weixin.qq.com; here that host is the fake.
	util.DefaultHTTPClient = &http.Client{Transport: toFake{fakeAddr}, Timeout: 10 * time.Second}
	// The SDK gets a wrong secret on purpose: were it to fetch a token of
	// its own, WeChat would refuse it.
	oa := wechat.NewWechat().GetOfficialAccount(&offConfig.Config{AppID: "wx-demo", AppSecret: "the-sdk-never-needs-it", Cache: cache.NewMemory()})
	oa.SetAccessTokenHandle(AccessTokenHandle{Client: c, App: "mp"})
	for range 3 {
		ips, err := oa.GetBasic().GetCallbackIP()
		if err != nil || len(ips) == 0 {
			t.Fatalf("GetCallbackIP = %v, %v", ips, err)
		}
	}

	tok, _, err := c.AccessToken(context.Background(), "mp")
	if err != nil {
		t.Fatal(err)
	}
	var stats struct {
		Requests int      `json:"token_requests"`
		Issued   int      `json:"issued"`
		Seen     []string `json:"seen"`
	}
	resp, err := http.Get("http://" + fakeAddr + "/fake/stats?id=wx-demo&path=" + url.QueryEscape("/cgi-bin/getcallbackip"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		t.Fatal(err)
	}
	if strings.Join(stats.Seen, ",") != strings.Join([]string{tok, tok, tok}, ",") {
		t.Fatalf("the SDK's calls carried %d tokens, not lockd's three times", len(stats.Seen))
	}
	if stats.Requests != 1 || stats.Issued != 1 {
		t.Fatalf("%d token requests and %d tokens issued, want lockd's one", stats.Requests, stats.Issued)
	}
}

// toFake sends every request to the fake upstream at addr, over HTTP.
type toFake struct{ addr string }

func (f toFake) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host = "http", f.addr
	return http.DefaultTransport.RoundTrip(r)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// start runs the binary env names (or builds pkg from the repository when
// env is unset) with args, waits until addr accepts connections, and kills
// it when the test ends.
func start(t *testing.T, env, pkg, addr string, environ []string, args ...string) {
	t.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		bin = filepath.Join(t.TempDir(), filepath.Base(pkg))
		build := exec.Command("go", "build", "-o", bin, pkg)
		build.Dir = filepath.Join("..", "..")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), environ...)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			return
		}
		select {
		case <-done:
			t.Fatalf("%s exited:\n%s", pkg, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready in 30s:\n%s", pkg, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
