package vmtop

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Families are one scrape's metric families by name.
type Families map[string]*dto.MetricFamily

// AcceptHeader asks an agent for the Prometheus text format (or delimited protobuf), the two
// formats Parse reads.
const AcceptHeader = `application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3`

// Parse reads one exposition whose HTTP response header is h (its Content-Type picks the
// format; nil or unknown: text).
func Parse(r io.Reader, h http.Header) (Families, error) {
	dec := expfmt.NewDecoder(r, expfmt.ResponseFormat(h))
	fams := Families{}
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			return fams, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parse metrics: %w", err)
		}
		if old, ok := fams[mf.GetName()]; ok { // the same family twice (protobuf allows it)
			old.Metric = append(old.Metric, mf.Metric...)
			continue
		}
		fams[mf.GetName()] = mf
	}
}
