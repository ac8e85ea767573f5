package ui_test

import "os"

func osArgs() []string { return os.Args[1:] }
