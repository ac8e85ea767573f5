// Package citest checks the repository's CI definitions, which cannot run
// here: it lints the GitHub Actions workflows with actionlint, checks that
// every go command they run names flags and packages that exist, and that
// they run the README's test command (with and without MONGODB_URI) and
// every go command of .ci/run. It has no API: everything is in its _test.go
// files.
//
// actionlint runs as the program in lintworkflows/, a module of its own with
// its own go.mod, because actionlint v1.7.12 does not compile against the
// go.yaml.in/yaml/v4 release the main module's other dependencies need; the
// tests build it with go run, so the first run downloads it.
package citest
