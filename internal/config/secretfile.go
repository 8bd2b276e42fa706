package config

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// ReadSecretFile reads the secret held in the file at path, such as
// --redis-password-file's or the CLI's --token-file: at most
// MaxSecretFileBytes, without its trailing line ends, never empty. Its
// errors never show path, as a secret pasted where a file name belongs
// would reach the logs: the caller names the flag instead.
func ReadSecretFile(path string) (string, error) {
	data, err := readBounded(path, MaxSecretFileBytes)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		if errors.Is(err, errTooLong) {
			return "", fmt.Errorf("the file named there is longer than %d bytes", MaxSecretFileBytes)
		}
		return "", fmt.Errorf("the file named there cannot be read: %w", err)
	}
	v := strings.TrimRight(string(data), "\r\n")
	if v == "" {
		return "", errors.New("the file named there is empty")
	}
	return v, nil
}
