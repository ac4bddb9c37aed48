// Package casecret keeps a certificate authority (package pki) in a Kubernetes Secret of type
// kubernetes.io/tls: Ensure makes it on first use, Read reads it. vmlet controller keeps two
// this way: the subresources API's (controllers/subresources) and the migration CA
// (controllers/migrationca).
package casecret
