package gateway

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/lockd/lockd/gen/lockd/v1" // registers lockd.v1
)

const mappingFile = "../../proto/lockd/v1/gateway.yaml"

// TestEveryRPCIsMapped keeps the HTTP/JSON gateway in step with the API:
// every RPC of lockd.v1 has a rule in gateway.yaml, and every service with
// a rule is registered with the gateway.
func TestEveryRPCIsMapped(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(mappingFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		HTTP struct {
			Rules []struct {
				Selector string `yaml:"selector"`
			} `yaml:"rules"`
		} `yaml:"http"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatalf("%s: %v", mappingFile, err)
	}
	rules := map[string]bool{}
	for _, r := range file.HTTP.Rules {
		rules[r.Selector] = true
	}

	methods := map[string]bool{}
	protoregistry.GlobalFiles.RangeFilesByPackage("lockd.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			mapped := false
			for j := range sd.Methods().Len() {
				name := string(sd.Methods().Get(j).FullName())
				methods[name] = true
				if rules[name] {
					mapped = true
					continue
				}
				t.Errorf("%s has no HTTP rule: add one to proto/lockd/v1/gateway.yaml (how: see its top) and run make generate", name)
			}
			if _, ok := services[string(sd.FullName())]; mapped && !ok {
				t.Errorf("%s has HTTP rules but is not registered: add lockdv1gw.Register%sHandlerClient to services in internal/gateway/gateway.go", sd.FullName(), sd.Name())
			}
		}
		return true
	})
	if len(methods) == 0 {
		t.Fatal("no lockd.v1 RPCs registered")
	}
	for sel := range rules {
		if !methods[sel] {
			t.Errorf("gateway.yaml maps %s, which is not an RPC of lockd.v1", sel)
		}
	}
	for name := range services {
		if !strings.HasPrefix(name, "lockd.v1.") {
			t.Errorf("services registers %s, outside lockd.v1", name)
		}
	}
}
