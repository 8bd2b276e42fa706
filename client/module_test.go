package client_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// denied are module path prefixes of lockd's server, tests and tools that
// a program using the client must never get: neither in its module graph
// nor linked.
var denied = []string{
	"github.com/lockd/lockd ", // the main module itself (the graph lists "path version")
	"go.etcd.io/etcd",
	"github.com/bufbuild/", "buf.build/",
	"github.com/bojand/ghz",
	"github.com/fullstorydev/grpcurl",
	"github.com/chromedp/",
	"github.com/Shopify/toxiproxy",
	"github.com/alicebob/miniredis",
	"github.com/grpc-ecosystem/grpc-gateway",
	"github.com/grpc-ecosystem/go-grpc-middleware",
	"github.com/redis/go-redis",
	"github.com/prometheus/",
	"go.opentelemetry.io/contrib/instrumentation/",
	"go.opentelemetry.io/otel/exporters/",
	"github.com/anishathalye/porcupine",
	"github.com/rs/zerolog",
	"go.yaml.in/yaml",
}

// TestModuleGraph builds a fresh module that imports only the client, with
// the replace directives docs/clients-go.md gives for a checkout, and
// checks what it gets: no module beyond those grpc and protobuf bring
// (measured the same way for a module that requires only them), none of
// the denied ones, and a binary that links neither grpc-gateway nor
// anything of lockd's but the client and its messages.
func TestModuleGraph(t *testing.T) {
	t.Parallel()
	clientDir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	var mod struct {
		Go      string
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(goCmd(t, clientDir, "mod", "edit", "-json"), &mod); err != nil {
		t.Fatal(err)
	}

	// The require and replace directives docs/clients-go.md gives, for a
	// checkout in ../lockd: here the repository around the client.
	page, err := os.ReadFile(docsPage)
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- go-mod-replace[^>]*-->\\s*```\\n(.*?)```").FindSubmatch(page)
	if block == nil {
		t.Fatalf("%s has no go-mod-replace block", docsPage)
	}
	directives := strings.ReplaceAll(string(block[1]), "../lockd/", filepath.Dir(clientDir)+"/")
	app := t.TempDir()
	writeFile(t, filepath.Join(app, "go.mod"), "module example.com/app\n\ngo "+mod.Go+"\n\n"+directives)
	writeFile(t, filepath.Join(app, "main.go"), `package main

import (
	"context"
	"log"

	"github.com/lockd/lockd/client"
)

func main() {
	c, err := client.New([]string{"127.0.0.1:50051"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	lease, err := c.Acquire(context.Background(), "orders/42")
	if err != nil {
		log.Fatal(err)
	}
	_ = lease.Release(context.Background())
}
`)
	goCmd(t, app, "mod", "tidy")
	graph := modules(t, app)

	// The same for a module that requires only what the client requires
	// besides its messages.
	base := t.TempDir()
	var reqs strings.Builder
	for _, r := range mod.Require {
		if !strings.HasPrefix(r.Path, "github.com/lockd/") {
			reqs.WriteString("require " + r.Path + " " + r.Version + "\n")
		}
	}
	writeFile(t, filepath.Join(base, "go.mod"), "module example.com/base\n\ngo "+mod.Go+"\n\n"+reqs.String())
	writeFile(t, filepath.Join(base, "main.go"), `package main

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/protobuf/types/known/durationpb"
)

func main() { _, _ = grpc.NewClient("127.0.0.1:50051", grpc.WithTransportCredentials(insecure.NewCredentials())) }
`)
	goCmd(t, base, "mod", "tidy")
	baseline := modules(t, base)
	t.Logf("a module importing the client has %d modules in its graph; one requiring only grpc and protobuf %d", len(graph), len(baseline))

	for _, m := range graph {
		path, _, _ := strings.Cut(m, " ")
		switch path {
		case "example.com/app", "github.com/lockd/lockd/client", "github.com/lockd/lockd/gen":
			continue
		}
		for _, d := range denied {
			if strings.HasPrefix(m+" ", d) {
				t.Errorf("the graph holds %s", m)
			}
		}
		if !slices.Contains(baseline, m) {
			t.Errorf("the graph holds %s, which grpc and protobuf alone do not bring", m)
		}
	}

	// What the program links: go version -m lists a binary's modules.
	bin := filepath.Join(app, "app")
	goCmd(t, app, "build", "-o", bin, ".")
	for _, line := range strings.Split(string(goCmd(t, app, "version", "-m", bin)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "dep" && f[0] != "=>" {
			continue
		}
		if strings.HasPrefix(f[1], "github.com/lockd/") && f[1] != "github.com/lockd/lockd/client" && f[1] != "github.com/lockd/lockd/gen" ||
			strings.HasPrefix(f[1], "github.com/grpc-ecosystem/") {
			t.Errorf("the program links %s", f[1])
		}
	}
}

// modules returns `go list -m all` of the module in dir: "path version".
func modules(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(goCmd(t, dir, "list", "-m", "all"))), "\n") {
		// A replaced module is listed as "path version => replacement".
		path, _, _ := strings.Cut(line, " => ")
		out = append(out, strings.TrimSpace(path))
	}
	return out
}

// goCmd runs the go command in dir, outside any workspace, and returns its
// standard output.
func goCmd(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr)
	}
	return out
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
