package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster/internal/version"
)

func newVersion(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print lockcluster's version, git revision and Go version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := g.checkOutput(); err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(os.Stdout, version.Current())
			}
			fmt.Println(version.Current())
			return nil
		},
	}
}
