//go:build unix

package integration

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/mongodb"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
)

// Backend kinds.
const (
	kindExternal = "mongodb (MONGODB_URI)"
	kindDocker   = "mongo:7 replica set rs0 (testcontainers)"
	kindEmbedded = "ferretdb (embedded)"
)

const (
	mongoImage = "mongo:7"
	// dockerProbeTimeout bounds asking a Docker engine whether it is there.
	dockerProbeTimeout = 10 * time.Second
	// containerStartTimeout bounds pulling the image and starting it.
	containerStartTimeout = 5 * time.Minute
)

// backend is the server the tests and the instances they start use.
type backend struct {
	Kind string
	// URI is what instances connect to. It may carry credentials: never
	// print it.
	URI string
	// ReplicaSet: replSetStepDown and majority writes are real.
	ReplicaSet bool
	// Embedded: mongotest.StopServer can stop the server.
	Embedded bool
	// Faults: mongotest.NewProxiedClient reaches the server. Not with
	// testcontainers: the proxy dials the primary's address inside Docker's
	// network, which the host does not always reach.
	Faults bool
}

var (
	backendOnce sync.Once
	theBackend  backend
	backendErr  error

	// Set by selectBackend, read after the tests by closeBackend.
	container  *mongodb.MongoDBContainer
	dockerSeen bool // the Docker client was used: it leaves goroutines
)

// useBackend returns the server of the run, choosing it on first use (see the
// package documentation). Call it before any mongotest helper: when it
// starts a container it points mongotest at it through MONGODB_URI.
func useBackend(tb testing.TB) backend {
	tb.Helper()
	backendOnce.Do(func() {
		backendErr = errors.New("integration: choosing the backend failed in an earlier test")
		theBackend, backendErr = selectBackend(tb)
	})
	if backendErr != nil {
		tb.Fatal(backendErr)
	}
	return theBackend
}

func selectBackend(tb testing.TB) (backend, error) {
	var b backend
	if uri := os.Getenv(mongotest.EnvURI); uri != "" {
		rs := isReplicaSet(tb, uri)
		b = backend{Kind: kindExternal, URI: uri, ReplicaSet: rs, Faults: true}
	} else if uri, why := startContainer(); uri != "" {
		// mongotest's helpers connect to the container too.
		if err := os.Setenv(mongotest.EnvURI, uri); err != nil {
			return b, err
		}
		b = backend{Kind: kindDocker, URI: uri, ReplicaSet: true}
	} else {
		fmt.Fprintf(os.Stderr, "integration: no MongoDB container (%s); using the embedded FerretDB\n", why)
		uri, err := embeddedURI()
		if err != nil {
			return b, err
		}
		b = backend{Kind: kindEmbedded, URI: uri, Embedded: true, Faults: true}
	}
	fmt.Fprintf(os.Stderr, "integration: backend=%q replicaSet=%v\n", b.Kind, b.ReplicaSet)
	return b, nil
}

// embeddedURI starts mongotest's embedded FerretDB.
func embeddedURI() (uri string, err error) {
	defer func() {
		if p := recover(); p != nil { // mongotest.URI panics if it cannot start
			err = fmt.Errorf("integration: %v", p)
		}
	}()
	return mongotest.URI(), nil
}

// startContainer starts a MongoDB single-node replica set if a Docker engine
// answers, and returns its URI, or "" and why not.
func startContainer() (uri, why string) {
	if !*useDocker {
		return "", "-integration.docker=false"
	}
	if hint := dockerHint(); hint == "" {
		return "", "no Docker engine: DOCKER_HOST is unset and no Docker socket or configuration was found"
	}
	dockerSeen = true
	if err := dockerAnswers(); err != nil {
		return "", "the Docker engine does not answer: " + strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	ctx, cancel := context.WithTimeout(context.Background(), containerStartTimeout)
	defer cancel()
	ctr, err := mongodb.Run(ctx, mongoImage, mongodb.WithReplicaSet("rs0"))
	if err != nil {
		if ctr != nil {
			_ = testcontainers.TerminateContainer(ctr)
		}
		return "", fmt.Sprintf("start %s: %v", mongoImage, err)
	}
	cs, err := ctr.ConnectionString(ctx)
	if err == nil {
		cs, err = directConnection(cs)
	}
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return "", fmt.Sprintf("connection string of %s: %v", mongoImage, err)
	}
	container = ctr
	return cs, ""
}

// directConnection adds directConnection=true: the replica set member
// advertises its address inside Docker's network, which the host may not
// reach, so the driver must not follow it (as the module's own tests do).
func directConnection(uri string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("directConnection", "true")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// dockerHint returns what suggests that a Docker engine may be there, or ""
// if nothing does. It only looks at the environment and the file system, so
// a machine without Docker costs nothing.
func dockerHint() string {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return "DOCKER_HOST"
	}
	home, _ := os.UserHomeDir()
	candidates := []string{"/var/run/docker.sock"}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		candidates = append(candidates, filepath.Join(d, "docker.sock"))
	}
	if home != "" {
		candidates = append(candidates,
			filepath.Join(home, ".testcontainers.properties"),
			filepath.Join(home, ".docker", "run", "docker.sock"),
			filepath.Join(home, ".docker", "desktop", "docker.sock"),
			filepath.Join(home, ".docker", "contexts", "meta"),
			filepath.Join(home, ".colima", "default", "docker.sock"),
		)
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return c
		}
	}
	return ""
}

// dockerAnswers asks the engine testcontainers would use for its info, within
// dockerProbeTimeout. testcontainers looks the engine up with a context that
// never ends, so the probe runs in a goroutine that may be left behind.
func dockerAnswers() error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerProbeTimeout)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil { // testcontainers panics when it finds no engine
				res <- fmt.Errorf("%v", p)
			}
		}()
		p, err := testcontainers.NewDockerProvider()
		if err != nil {
			res <- err
			return
		}
		res <- p.Health(ctx)
	}()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer within %v", dockerProbeTimeout)
	}
}

func dockerUsed() bool { return dockerSeen }

// closeBackend stops the container, if one was started.
func closeBackend() error {
	if container == nil {
		return nil
	}
	if err := testcontainers.TerminateContainer(container); err != nil {
		return fmt.Errorf("terminate %s: %w", mongoImage, err)
	}
	return nil
}

// isReplicaSet connects to uri and asks whether it is a replica set member.
func isReplicaSet(tb testing.TB, uri string) bool {
	tb.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(mongotest.DefaultServerSelectionTimeout))
	if err != nil {
		tb.Fatalf("integration: %s: %v", mongotest.EnvURI, err)
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	return mongotest.IsReplicaSet(tb, c)
}
