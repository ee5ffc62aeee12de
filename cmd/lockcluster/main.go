// Command lockcluster runs lockcluster nodes (serve, dev) and talks to a
// cluster (lock, query, members, status, join, leave, health).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

func main() {
	root := newRoot()
	err := root.Execute()
	if err == nil {
		return
	}
	code := exitFailure
	msg := err.Error()
	var ex *exitError
	if errors.As(err, &ex) {
		code, msg = ex.code, ex.msg
	}
	msg = strings.TrimPrefix(msg, "lockcluster: ")
	switch {
	case msg == "":
	case root.PersistentFlags().Lookup("output").Value.String() == "json":
		// -o json: the error too is an object, on stderr.
		b, _ := json.Marshal(map[string]any{"error": msg, "exitCode": code})
		fmt.Fprintf(os.Stderr, "%s\n", b)
	default:
		fmt.Fprintln(os.Stderr, "lockcluster:", msg)
	}
	os.Exit(code)
}
