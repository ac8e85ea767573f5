package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestOptions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		opts []Option
		want string
	}{
		{"nil option", []Option{nil}, "cli: invalid option: nil option"},
		{"empty name", []Option{WithName(" ")}, `WithName: " " is not a program name`},
		{"job without spec", []Option{WithJobs(Job{Name: "nightly"})}, `WithJobs: job "nightly" with spec ""`},
		{"job twice", []Option{WithJobs(Job{Name: "a", Spec: "@daily"}), WithJobs(Job{Name: "a", Spec: "@hourly"})}, `job "a" registered twice`},
		{"nil server", []Option{WithDevServer(nil)}, "WithDevServer: nil function"},
		{"empty database", []Option{WithDatabase("")}, `WithDatabase: "" is not a database name`},
		{"bad database", []Option{WithDatabase("a/b")}, `WithDatabase: "a/b" is not a database name`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			code := Run(context.Background(), []string{"locks", "list"}, append([]Option{WithStdio(nil, &out, &errb)}, tt.opts...)...)
			if code != ExitFailure || out.Len() != 0 || !strings.HasPrefix(errb.String(), "mongolock: ") || !strings.Contains(errb.String(), tt.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, out.String(), errb.String(), ExitFailure, tt.want)
			}
		})
	}
}
