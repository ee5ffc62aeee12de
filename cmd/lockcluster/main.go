// Command lockcluster runs lockcluster nodes (serve, dev) and talks to a
// cluster (lock, query, members, status, join, leave, health).
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

func main() {
	err := newRoot().Execute()
	var ex *exitError
	if errors.As(err, &ex) {
		if ex.msg != "" {
			fmt.Fprintln(os.Stderr, "lockcluster:", strings.TrimPrefix(ex.msg, "lockcluster: "))
		}
		os.Exit(ex.code)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockcluster:", strings.TrimPrefix(err.Error(), "lockcluster: "))
		os.Exit(1)
	}
}
