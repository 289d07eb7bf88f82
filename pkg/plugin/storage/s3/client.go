// Package s3 is kubectl-tao's S3 client, an engine that moves data between S3 and the local file
// system: the credentials and client, downloads of objects and prefixes, uploads of output
// files and trees, and the listing and deletion of a run's results prefix. It knows nothing of
// cobra or of Kubernetes; `kubectl-tao stage`, `results` and `delete-artifacts` are thin layers
// over it.
package s3

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/redact"
)

// awsEndpoint is used when S3_ENDPOINT_URL is empty, as the SDK's boto3 client does.
const awsEndpoint = "s3.amazonaws.com"

// Config is what reaching S3 takes. Its String never shows the secret.
type Config struct {
	AccessKey string
	SecretKey string
	// Bucket is S3_BUCKET_NAME: where outputs go. Inputs name their own bucket.
	Bucket string
	// Endpoint is S3_ENDPOINT_URL: http(s)://HOST[:PORT], or empty for AWS.
	Endpoint string
}

// String describes the configuration without its secret, for messages.
func (c Config) String() string {
	ep := c.Endpoint
	if ep == "" {
		ep = "AWS S3"
	}
	return fmt.Sprintf("bucket %q at %s", c.Bucket, ep)
}

// ConfigFromEnv reads the staging variables with getenv.
func ConfigFromEnv(getenv func(string) string) Config {
	return Config{
		AccessKey: getenv(s3layout.EnvAccessKey),
		SecretKey: getenv(s3layout.EnvSecretKey),
		Bucket:    getenv(s3layout.EnvBucket),
		Endpoint:  getenv(s3layout.EnvEndpoint),
	}
}

// ConfigFromSecretData reads the staging keys of a Secret's data.
func ConfigFromSecretData(data map[string][]byte) Config {
	return Config{
		AccessKey: string(data[s3layout.EnvAccessKey]),
		SecretKey: string(data[s3layout.EnvSecretKey]),
		Bucket:    string(data[s3layout.EnvBucket]),
		Endpoint:  string(data[s3layout.EnvEndpoint]),
	}
}

// Missing names the required variables that are empty. The bucket is required only where
// outputs are written or results deleted (inputs carry their bucket in the URL).
func (c Config) Missing(needBucket bool) []string {
	var m []string
	if c.AccessKey == "" {
		m = append(m, s3layout.EnvAccessKey)
	}
	if c.SecretKey == "" {
		m = append(m, s3layout.EnvSecretKey)
	}
	if needBucket && c.Bucket == "" {
		m = append(m, s3layout.EnvBucket)
	}
	return m
}

// Check reports missing variables and a malformed bucket or endpoint, naming where they came
// from (from is e.g. "the environment" or "secret/train-1-s3").
func (c Config) Check(needBucket bool, from string) error {
	if m := c.Missing(needBucket); len(m) > 0 {
		return exitcode.Usagef("S3 credentials incomplete: %s not set in %s", strings.Join(m, ", "), from)
	}
	if c.Bucket != "" {
		if err := s3layout.ValidateBucket(c.Bucket); err != nil {
			return exitcode.Usagef("%s from %s: %w", s3layout.EnvBucket, from, err)
		}
	}
	if _, _, err := ParseEndpoint(c.Endpoint); err != nil {
		return exitcode.Usagef("%s from %s: %w", s3layout.EnvEndpoint, from, err)
	}
	return nil
}

// ParseEndpoint turns S3_ENDPOINT_URL into minio-go's host[:port] and whether to use TLS. The
// scheme decides TLS; a bare host means https. Empty means AWS.
func ParseEndpoint(s string) (host string, secure bool, err error) {
	if s == "" {
		return awsEndpoint, true, nil
	}
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	// Errors quote the URL only with its password masked: it may carry one, where url.Parse
	// does not see it (url.Redacted masks only what parsed as userinfo).
	quoted := redact.URL(s)
	u, err := url.Parse(s)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error quotes the whole URL
		}
		return "", false, fmt.Errorf("invalid endpoint URL: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", false, fmt.Errorf("endpoint %q: the scheme must be http or https", quoted)
	case u.Host == "":
		return "", false, fmt.Errorf("endpoint %q names no host", quoted)
	case strings.Contains(u.Host, "%"):
		// A %-escape in the host (or an IPv6 zone) does not survive being handed on as
		// host[:port]: minio-go parses it again and reads the unescaped % as a bad escape.
		return "", false, fmt.Errorf("endpoint %q: the host may not hold a %%-escape or an IPv6 zone", quoted)
	case u.User != nil:
		return "", false, errors.New("the endpoint URL may not carry credentials: use ACCESS_KEY and SECRET_KEY")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return "", false, fmt.Errorf("endpoint %q: want only scheme://host[:port], without a path", quoted)
	}
	return u.Host, u.Scheme == "https", nil
}

// NewClient builds a client with the static credentials of c (never the environment's or an
// instance role's). Custom endpoints get path-style addressing (bucket in the path, which every
// S3-compatible server supports); AWS gets its default virtual-host style. transport may be nil.
func NewClient(c Config, transport http.RoundTripper) (*minio.Client, error) {
	host, secure, err := ParseEndpoint(c.Endpoint)
	if err != nil {
		return nil, exitcode.WithCode(exitcode.Usage, err)
	}
	lookup := minio.BucketLookupPath
	if c.Endpoint == "" {
		lookup = minio.BucketLookupAuto
	}
	client, err := minio.New(host, &minio.Options{
		Creds:        credentials.NewStaticV4(c.AccessKey, c.SecretKey, ""),
		Secure:       secure,
		Transport:    transport,
		BucketLookup: lookup,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the S3 client for %s: %w", host, err)
	}
	return client, nil
}

// Object is one listed object.
type Object struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
	// LastModified and ETag are as the listing reports them (`results` shows the first, and
	// `results --download` checks both to skip files already complete).
	LastModified time.Time `json:"lastModified,omitzero"`
	ETag         string    `json:"etag,omitempty"`
}

// credentialCodes are the S3 error codes of rejected credentials (not of missing permissions).
var credentialCodes = map[string]bool{
	"SignatureDoesNotMatch":        true,
	"InvalidAccessKeyId":           true,
	"InvalidToken":                 true,
	"ExpiredToken":                 true,
	"InvalidSecurity":              true,
	"AuthorizationHeaderMalformed": true,
	// versitygw answers an unknown access key with 404 XAdminUserNotFound.
	"XAdminUserNotFound": true,
}

// Describe turns an S3 error about what (an s3:// URL or prefix) into an error a user can act
// on, with the exit code it maps to: NotFound for 404, Forbidden for 403 (missing permission or
// rejected credentials). Other errors keep their text, prefixed with what, and exit code Error.
func Describe(err error, op, what string) error {
	if err == nil {
		return nil
	}
	if exitcode.Coded(err) {
		return err // already explained
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case credentialCodes[resp.Code]:
		return exitcode.WithCode(exitcode.Forbidden, fmt.Errorf("%s %s: S3 rejected the credentials (%s): check %s and %s",
			op, what, resp.Code, s3layout.EnvAccessKey, s3layout.EnvSecretKey))
	case resp.Code == "NoSuchBucket":
		return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("%s %s: the bucket does not exist (404 NoSuchBucket)", op, what))
	case resp.StatusCode == http.StatusNotFound || resp.Code == "NoSuchKey":
		code := resp.Code
		if code == "" {
			code = "NotFound"
		}
		return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("%s %s: no such object (404 %s)", op, what, code))
	case resp.StatusCode == http.StatusForbidden || resp.Code == "AccessDenied":
		return exitcode.WithCode(exitcode.Forbidden, fmt.Errorf("%s %s: access denied (403 %s): the credentials lack permission for it",
			op, what, orDefault(resp.Code, "AccessDenied")))
	case resp.StatusCode != 0:
		return fmt.Errorf("%s %s: S3 answered %d %s: %w", op, what, resp.StatusCode, orDefault(resp.Code, http.StatusText(resp.StatusCode)), err)
	}
	// Coded, so that exitcode.Explain never takes a connection S3 refused for the API server's.
	return exitcode.WithCode(exitcode.Error, fmt.Errorf("%s %s: %w", op, what, err))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
