package wsread

import (
	"fmt"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// Until reads messages from c until their bytes contain want, within d. It returns what it read;
// the error says why want did not come (the stream ended or d passed).
func Until(c *websocket.Conn, want string, d time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	var got strings.Builder
	for !strings.Contains(got.String(), want) {
		_, b, err := c.ReadMessage()
		got.Write(b)
		if err != nil {
			return got.String(), fmt.Errorf("read %q: %w", want, err)
		}
	}
	return got.String(), nil
}
