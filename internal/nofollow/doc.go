// Package nofollow connects to unix sockets inside a folder without following symlinks: a
// launcher's run folder is writable by the launcher's (unprivileged) user, so the node agent,
// which is root, must not let a symlink planted there redirect it to another socket.
package nofollow
