// Package wsread reads websocket streams in tests: the subresources' console, VNC and
// port-forward streams, whose bytes come in messages of any size.
package wsread
