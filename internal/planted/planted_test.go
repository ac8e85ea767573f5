package planted

import "testing"

func TestPlant(t *testing.T) {
	if On(DropFiring) {
		t.Fatal("a bug is on before any was planted")
	}
	undo := Plant(DropFiring)
	if !On(DropFiring) || On(RunTwice) {
		t.Fatal("only the planted bug is on")
	}
	undoOther := Plant(RunTwice)
	undo() // replaced already: leaves the other planted
	if !On(RunTwice) || On(DropFiring) {
		t.Fatal("a later plant replaces an earlier one, whose undo leaves it")
	}
	undoOther()
	for _, b := range All {
		if On(b) {
			t.Fatalf("%q still on after its undo", b)
		}
	}
}
