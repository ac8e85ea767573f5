package lock

import (
	"os"
	"strconv"
	"strings"
)

// NewKeeperID returns an id unique to this process run: hostname, pid and a
// random part. The random part matters in containers, where every pid is 1
// and hostnames repeat across restarts.
func NewKeeperID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	if len(host) > 200 {
		host = host[:200]
	}
	host = strings.ToValidUTF8(strings.ReplaceAll(host, "\x00", ""), "?")
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + newNonce()
}
