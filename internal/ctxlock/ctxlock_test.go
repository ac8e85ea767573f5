package ctxlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestMutex(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New()
		if err := m.Lock(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := m.Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock of a held mutex = %v, want the context's error", err)
		}
		got := make(chan error)
		go func() { got <- m.Lock(context.Background()) }()
		synctest.Wait() // durably blocked: the bubble is idle
		m.Unlock()
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		m.Unlock()
	})
}
