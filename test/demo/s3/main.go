// Command s3 serves the demo's S3 bucket: versitygw (test/s3server) on the real node's bridge
// address, where the demo's pods reach the host, with a bucket made and fresh root keys. It
// writes the staging variables (ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME, S3_ENDPOINT_URL) as
// shell assignments into a file only its owner may read, once the bucket exists, and serves
// until it gets SIGTERM or SIGINT. The keys never go on a command line or to the terminal.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/test/s3server"
)

func main() {
	host := flag.String("host", "", "the address to serve on: the real node's bridge address")
	dir := flag.String("dir", "", "the directory the buckets are kept in (made when missing)")
	bucket := flag.String("bucket", "demo", "the bucket to make")
	envFile := flag.String("env-file", "", "where to write the staging variables (mode 0600)")
	flag.Parse()
	if err := run(*host, *dir, *bucket, *envFile); err != nil {
		fmt.Fprintln(os.Stderr, "demo s3:", err)
		os.Exit(1)
	}
}

func run(host, dir, bucket, envFile string) error {
	if host == "" || dir == "" || envFile == "" {
		return errors.New("-host, -dir and -env-file are required")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	srv, stop, err := s3server.Run(host, dir)
	if err != nil {
		return err
	}
	defer stop()
	if err := srv.Client.MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{}); err != nil {
		return fmt.Errorf("making bucket %s: %w", bucket, err)
	}
	var b strings.Builder
	for _, kv := range srv.Env(bucket) {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "%s='%s'\n", k, v)
	}
	// Written whole under another name, then renamed: the demo waits for the file to exist.
	tmp := filepath.Join(filepath.Dir(envFile), "."+filepath.Base(envFile)+".tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, envFile); err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return nil
}
