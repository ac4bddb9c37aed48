package imagebuild

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// CABundlePath is where Go's crypto/x509 (and most TLS clients) look for the system roots.
const CABundlePath = "/etc/ssl/certs/ca-certificates.crt"

// CABundle concatenates the Mozilla certificates of Debian's ca-certificates package unpacked in
// root, sorted by name: what update-ca-certificates writes with the package's default
// configuration (every certificate enabled), without running it. The agent needs it to pull
// containerDisks from HTTPS registries.
//
// Equivalent to: cat /usr/share/ca-certificates/mozilla/*.crt > /etc/ssl/certs/ca-certificates.crt
func CABundle(root string) ([]byte, error) {
	certs, err := filepath.Glob(filepath.Join(root, "usr/share/ca-certificates/mozilla/*.crt"))
	if err != nil || len(certs) == 0 {
		return nil, fmt.Errorf("CA bundle: no certificates under %s/usr/share/ca-certificates/mozilla (is ca-certificates unpacked?)", root)
	}
	sort.Strings(certs)
	var b bytes.Buffer
	for _, c := range certs {
		pem, err := os.ReadFile(c)
		if err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		b.Write(pem)
		if !bytes.HasSuffix(pem, []byte("\n")) {
			b.WriteByte('\n')
		}
	}
	return b.Bytes(), nil
}
