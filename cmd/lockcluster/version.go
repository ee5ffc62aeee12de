package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster/internal/version"
)

// setVersion gives root its --version flag: the build, as 'version' prints it.
func setVersion(root *cobra.Command) {
	root.Version = version.Current().Version
	root.SetVersionTemplate(version.Current().String() + "\n")
}

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
