package cli_test

import (
	"context"
	"fmt"
	"os"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/cli"
	"github.com/mongolock/mongolock/migrations"
)

// A program with the mongolock command built in: `myapp migrate up` is its
// deploy step, and applies its own index migration with mongolock's.
func Example() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		// ... the application itself
		return
	}
	os.Exit(cli.Main(os.Args[1:], cli.WithName("myapp"),
		cli.WithDatabase("myapp"), // what the commands act on without --db
		cli.WithMigrations(migrations.EnsureIndex(1, migrations.Index{
			Collection: "users", Keys: bson.D{{Key: "email", Value: 1}}, Unique: true,
		})),
		cli.WithJobs(cli.Job{Name: "nightly-report", Spec: "0 3 * * *"}),
	))
}

// Errors are one line on stderr, under the program's name, with the exit
// code of the mongolock command.
func ExampleRun() {
	code := cli.Run(context.Background(), []string{"frobnicate"},
		cli.WithName("myapp"), cli.WithStdio(nil, os.Stdout, os.Stdout))
	fmt.Println("exit", code)
	// Output:
	// myapp: unknown command "frobnicate" (see myapp -h)
	// exit 2
}
