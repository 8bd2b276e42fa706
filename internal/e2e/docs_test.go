package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository's root, seen from this package's directory.
const repoRoot = "../.."

// docFiles lists README.md and every page of docs/, relative to repoRoot.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, p := range pages {
		files = append(files, filepath.ToSlash(strings.TrimPrefix(p, repoRoot+string(filepath.Separator))))
	}
	return files
}

// readDoc returns the text of a documentation file (relative to repoRoot).
func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docBlock returns the code block (in lang) that follows the comment
// <!-- name ... --> in README.md or a page of docs/, wherever it is. A
// name must mark exactly one block in all of them.
func docBlock(t *testing.T, name, lang string) string {
	t.Helper()
	re := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(name) + "[ :][^>]*-->\\s*```" + lang + "\\n(.*?)```")
	var found []string
	var block string
	for _, f := range docFiles(t) {
		for _, m := range re.FindAllStringSubmatch(readDoc(t, f), -1) {
			found = append(found, f)
			block = m[1]
		}
	}
	switch len(found) {
	case 0:
		t.Fatalf("no %s block named %s in README.md or docs/", lang, name)
	case 1:
	default:
		t.Fatalf("%d %s blocks named %s (in %v); names must be unique", len(found), lang, name, found)
	}
	return block
}

var (
	fence      = regexp.MustCompile("(?ms)^```.*?^```")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading    = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	marker     = regexp.MustCompile(`<!-- ([a-z0-9-]+): (?:run|read|checked) by ([^\s>]+)`)
)

// TestDocsLinks checks that every relative link in README.md and docs/
// leads to a file or directory that exists, and, when it names a heading
// (#...) of a Markdown page, to a heading that page has.
func TestDocsLinks(t *testing.T) {
	t.Parallel()
	checked := 0
	for _, f := range docFiles(t) {
		text := inlineCode.ReplaceAllString(fence.ReplaceAllString(readDoc(t, f), ""), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := f
			if path != "" {
				file = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
			}
			checked++
			if _, err := os.Stat(filepath.Join(repoRoot, file)); err != nil {
				t.Errorf("%s links to %s: %s does not exist", f, target, file)
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !slices.Contains(anchors(readDoc(t, file)), anchor) {
				t.Errorf("%s links to %s: %s has no heading #%s", f, target, file, anchor)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("found only %d relative links in README.md and docs/", checked)
	}
}

// anchors lists the anchors GitHub gives the headings of a Markdown page:
// lower case, spaces to hyphens, punctuation other than - and _ dropped.
func anchors(page string) []string {
	var out []string
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(page, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// TestDocsExamplesAreRun checks that every example marked
// <!-- name: run by FILE --> (or read by, checked by) names a file that
// exists and mentions the block's name, and that no name marks two blocks.
func TestDocsExamplesAreRun(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, f := range docFiles(t) {
		for _, m := range marker.FindAllStringSubmatch(inlineCode.ReplaceAllString(readDoc(t, f), ""), -1) {
			name, runner := m[1], m[2]
			if prev, dup := seen[name]; dup {
				t.Errorf("the example name %s marks a block in %s and in %s", name, prev, f)
			}
			seen[name] = f
			src, err := os.ReadFile(filepath.Join(repoRoot, runner))
			if err != nil {
				t.Errorf("%s: the %s example names %s, which cannot be read: %v", f, name, runner, err)
				continue
			}
			if !strings.Contains(string(src), name) {
				t.Errorf("%s: the %s example names %s, which never mentions it", f, name, runner)
			}
		}
	}
	if len(seen) < 10 {
		t.Fatalf("found only %d marked examples in README.md and docs/: %v", len(seen), seen)
	}
}
