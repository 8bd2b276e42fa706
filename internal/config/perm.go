package config

import (
	"fmt"
	"io/fs"
	"os"
)

// OpenToOthers reports whether the file at path, which holds a secret, may
// be read by its group or by others, with its permission bits. A file that
// cannot be looked at is not reported: reading it reports that.
func OpenToOthers(path string) (fs.FileMode, bool) {
	return openToOthers(os.Stat, path)
}

func openToOthers(stat func(string) (fs.FileInfo, error), path string) (fs.FileMode, bool) {
	info, err := stat(path)
	if err != nil {
		return 0, false
	}
	perm := info.Mode().Perm()
	return perm, perm&0o044 != 0
}

// OpenToOthersWarning is the warning for a secret file that OpenToOthers
// reports; shown names it (the path, or a description where the path
// itself must not be shown).
func OpenToOthersWarning(shown string, perm fs.FileMode) string {
	return fmt.Sprintf("%s can be read by group or others (mode %04o): make it readable by lockd's user alone (chmod 600, or defaultMode: 0400 for a Kubernetes secret volume)", shown, perm)
}
