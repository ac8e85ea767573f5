package sim

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestZZScale(t *testing.T) {
	f, _ := os.Open("/tmp/open3.txt")
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	cnt := map[string]int{}
	for sc.Scan() {
		seed, rest, _ := strings.Cut(sc.Text(), " ")
		n, _ := strconv.ParseUint(seed, 10, 64)
		w := Draw(n)
		kind, _, _ := strings.Cut(rest, ":")
		cnt[fmt.Sprintf("%v %s %d", w.Faults.Drop, kind, n)]++
	}
	for k, v := range cnt {
		fmt.Println(k, v)
	}
}
