package client_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"
)

// docsPage is the manual's page on the Go client.
const docsPage = "../docs/clients-go.md"

// TestDocsShowTheExamples checks that docs/clients-go.md shows every
// Example function of the package, each in a block marked
// `<!-- example: Name -->`, as its body is (dedented, with addr written as
// the default address): the examples run by go test are the ones the page
// shows.
func TestDocsShowTheExamples(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(docsPage)
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]string{}
	block := regexp.MustCompile("(?s)<!-- example: (\\w+)[^>]*-->\\s*```go\\n(.*?)```")
	for _, m := range block.FindAllStringSubmatch(string(page), -1) {
		if _, dup := shown[m[1]]; dup {
			t.Errorf("%s shows %s twice", docsPage, m[1])
		}
		shown[m[1]] = m[2]
	}

	examples := exampleBodies(t, "example_test.go", "example_election_test.go", "example_ratelimit_test.go")
	for name, body := range examples {
		doc, ok := shown[name]
		if !ok {
			t.Errorf("%s does not show %s", docsPage, name)
			continue
		}
		want := strings.ReplaceAll(body, "[]string{addr}", `[]string{"127.0.0.1:50051"}`)
		if doc != want {
			t.Errorf("%s shows %s as\n%s\nbut its body is\n%s", docsPage, name, doc, want)
		}
	}
	for name := range shown {
		if _, ok := examples[name]; !ok {
			t.Errorf("%s shows %s, which is no Example function", docsPage, name)
		}
	}
}

// exampleBodies returns the bodies of the Example functions in files,
// dedented by one tab, each line ending in a newline.
func exampleBodies(t *testing.T, files ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			// The body's lines, between the braces, output comment and all.
			body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
			lines := strings.Split(strings.Trim(body, "\n"), "\n")
			var b strings.Builder
			for _, l := range lines {
				b.WriteString(strings.TrimPrefix(l, "\t") + "\n")
			}
			out[fn.Name.Name] = b.String()
		}
	}
	if len(out) == 0 {
		t.Fatalf("no Example functions in %v", files)
	}
	return out
}
