package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster/internal/pki"
)

func newTLS() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Create a private CA and certificates for trying TLS",
		Long: `Create a private certificate authority and certificates signed by it, to try
lockcluster with TLS and mutual TLS. Every certificate can serve (for the hosts
given) and act as a client (its identity is its name). For production, use
your own PKI.`,
	}
	var dir, name string
	var validity time.Duration
	ca := &cobra.Command{Use: "ca", Short: "Manage the CA"}
	caCreate := &cobra.Command{
		Use:   "create",
		Short: "Create DIR/ca.crt and DIR/ca.key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := pki.CreateCA(dir, name, validity); err != nil {
				return err
			}
			fmt.Printf("created %s and %s\n", filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
			return nil
		},
	}
	caCreate.Flags().StringVar(&dir, "dir", "certs", "directory for the CA's files")
	caCreate.Flags().StringVar(&name, "name", "lockcluster CA", "the CA's common name")
	caCreate.Flags().DurationVar(&validity, "validity", 10*365*24*time.Hour, "how long the CA is valid")
	ca.AddCommand(caCreate)

	var caDir, out, hosts string
	var certValidity time.Duration
	cert := &cobra.Command{Use: "cert", Short: "Manage certificates"}
	certCreate := &cobra.Command{
		Use:   "create NAME",
		Short: "Create OUT/NAME.crt and OUT/NAME.key, signed by the CA",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{code: exitUsage, msg: "usage: lockcluster tls cert create NAME [--hosts h1,h2]"}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var hs []string
			for _, h := range strings.Split(hosts, ",") {
				if h = strings.TrimSpace(h); h != "" {
					hs = append(hs, h)
				}
			}
			if out == "" {
				out = caDir
			}
			err := pki.CreateCert(pki.CertRequest{CADir: caDir, OutDir: out, Name: args[0], Hosts: hs, Validity: certValidity})
			if err != nil {
				return err
			}
			fmt.Printf("created %s and %s\n", filepath.Join(out, args[0]+".crt"), filepath.Join(out, args[0]+".key"))
			return nil
		},
	}
	certCreate.Flags().StringVar(&caDir, "ca-dir", "certs", "directory of the CA (ca.crt, ca.key)")
	certCreate.Flags().StringVar(&out, "dir", "", "directory for the certificate (default: --ca-dir)")
	certCreate.Flags().StringVar(&hosts, "hosts", "127.0.0.1,localhost", "DNS names and IP addresses the certificate serves")
	certCreate.Flags().DurationVar(&certValidity, "validity", 365*24*time.Hour, "how long the certificate is valid")
	cert.AddCommand(certCreate)
	cmd.AddCommand(ca, cert)
	return cmd
}
