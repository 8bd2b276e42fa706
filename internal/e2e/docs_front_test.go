package e2e

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeMaxLines is how long README.md may grow: a front page that says
// what lockd is and how to start, with the manual in docs/.
const readmeMaxLines = 250

// TestReadmeIsAFrontPage checks that README.md stays a front page: it
// opens, before its first section, with one code block holding exactly
// the two set-up commands `make run` and `make test` (comments aside), and
// it is at most readmeMaxLines lines long.
func TestReadmeIsAFrontPage(t *testing.T) {
	t.Parallel()
	readme := readDoc(t, "README.md")
	if n := strings.Count(strings.TrimRight(readme, "\n"), "\n") + 1; n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a page of docs/ and link it", n, readmeMaxLines)
	}

	block := fence.FindStringIndex(readme)
	if block == nil {
		t.Fatal("README.md has no code block; it must open with `make run` and `make test`")
	}
	if section := regexp.MustCompile(`(?m)^## `).FindStringIndex(readme); section != nil && section[0] < block[0] {
		t.Errorf("README.md's first code block comes after its first section; it must open the page")
	}
	// The lines between the opening fence's line and the closing fence.
	body := readme[block[0]:block[1]]
	first, last := strings.Index(body, "\n"), strings.LastIndex(body, "\n")
	body = body[first+1 : max(first+1, last)]
	var commands []string
	for _, line := range strings.Split(body, "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		if cmd = strings.Join(strings.Fields(cmd), " "); cmd != "" {
			commands = append(commands, cmd)
		}
	}
	if want := []string{"make run", "make test"}; !slices.Equal(commands, want) {
		t.Errorf("README.md's first code block runs %q, want exactly %q", commands, want)
	}
}
