package ui_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/ui"
)

// Serve the dashboard of a database under /mongolock/, with actions for
// the operators your proxy authenticated.
func Example() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(mongotest.URI())) // your MongoDB URI
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)
	db := client.Database("example_ui")
	defer db.Drop(ctx)

	h, err := ui.New(db,
		ui.WithPrefix("/mongolock"),
		ui.WithActions(func(r *http.Request, a ui.Action) error {
			user := r.Header.Get("X-Forwarded-User") // set by your authenticating proxy
			if user == "" {
				return ui.ErrUnauthenticated
			}
			ui.SetOperator(r, user) // recorded with the action
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mongolock/", h)
	srv := httptest.NewUnstartedServer(mux) // your server: give it timeouts
	srv.Config.ReadHeaderTimeout = ui.DefaultServerReadHeaderTimeout
	srv.Config.ReadTimeout = ui.DefaultServerReadTimeout
	srv.Config.WriteTimeout = ui.DefaultServerWriteTimeout
	srv.Config.IdleTimeout = ui.DefaultServerIdleTimeout
	srv.Start()
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/mongolock/jobs")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.Contains(string(body), "No job matches"))
	// Output: 200 true
}
