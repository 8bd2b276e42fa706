package faults

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Report collects one row per scenario for FAULTS.md.
type Report struct {
	mu   sync.Mutex
	rows []row
}

type row struct {
	name, fault string
	r           *Result
	control     bool
}

// Add records a scenario's result. control marks a negative control: a
// run that must report violations.
func (rep *Report) Add(name, fault string, r *Result, control bool) {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	rep.rows = append(rep.rows, row{name: name, fault: fault, r: r, control: control})
}

// Len returns how many scenarios were recorded.
func (rep *Report) Len() int {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	return len(rep.rows)
}

// WriteMarkdown writes the rows as a table, then each scenario's first
// violations.
func (rep *Report) WriteMarkdown(w io.Writer) error {
	rep.mu.Lock()
	rows := slices.Clone(rep.rows)
	rep.mu.Unlock()
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].control != rows[j].control {
			return !rows[i].control
		}
		return rows[i].name < rows[j].name
	})
	var b strings.Builder
	b.WriteString("| scenario | fault | holds | failed calls | overlaps (violating / stale / data-loss window) | double grants (violating / window) | stale writes rejected | writes out of fencing order | lost-lease reports | lead over next grant (min / median) | late reports (violating / after the holder's own expiry) | other | violations | verdict |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range rows {
		r := x.r
		v := len(r.Violations())
		verdict := "pass"
		switch {
		case x.control && v > 0:
			verdict = "pass (control: violations found, as it must)"
		case x.control:
			verdict = "**FAIL** (control found nothing)"
		case v > 0:
			verdict = "**FAIL**"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d (%d / %d / %d) | %d / %d | %d | %d | %d | %s | %d / %d | %d | %d | %s |\n",
			x.name, x.fault, r.Holds, r.FailedCalls, r.Overlaps, len(r.OverlapViolations), r.StaleOverlaps, r.WindowOverlaps,
			len(r.DoubleGrants)+len(r.OverLimit), r.WindowGrants, r.StaleWritesRejected, len(r.OutOfOrder), r.LossReports, leads(r.LeadTimes),
			len(r.LateReports), r.ReportsAfterExpiry, len(r.Extra)+len(r.TokenViolations)+len(r.ForcedUnreported), v, verdict)
	}
	for _, x := range rows {
		v := x.r.Violations()
		if len(v) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### %s: %d violations\n\n", x.name, len(v))
		for i, s := range v {
			if i == 10 {
				fmt.Fprintf(&b, "- … and %d more\n", len(v)-10)
				break
			}
			fmt.Fprintf(&b, "- %s\n", s)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func leads(ds []time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("%v / %v", s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond))
}
