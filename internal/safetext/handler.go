package safetext

import (
	"context"
	"log/slog"
)

// Handler wraps h so that every string it is given, message and attribute
// values alike (errors and Stringers too), is passed through Escape first:
// a key or a header a client chose cannot hide or reorder text in the logs.
func Handler(h slog.Handler) slog.Handler {
	if _, ok := h.(*handler); ok {
		return h
	}
	return &handler{h: h}
}

type handler struct{ h slog.Handler }

func (s *handler) Enabled(ctx context.Context, l slog.Level) bool { return s.h.Enabled(ctx, l) }

func (s *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Escape(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(escapeAttr(a))
		return true
	})
	return s.h.Handle(ctx, out)
}

func (s *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	esc := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		esc[i] = escapeAttr(a)
	}
	return &handler{h: s.h.WithAttrs(esc)}
}

func (s *handler) WithGroup(name string) slog.Handler {
	return &handler{h: s.h.WithGroup(Escape(name))}
}

func escapeAttr(a slog.Attr) slog.Attr {
	a.Key = Escape(a.Key)
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(Escape(v.String()))
	case slog.KindGroup:
		group := v.Group()
		esc := make([]slog.Attr, len(group))
		for i, g := range group {
			esc[i] = escapeAttr(g)
		}
		a.Value = slog.GroupValue(esc...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			a.Value = slog.StringValue(Escape(x.Error()))
		case interface{ String() string }:
			a.Value = slog.StringValue(Escape(x.String()))
		case []string:
			esc := make([]string, len(x))
			for i, s := range x {
				esc[i] = Escape(s)
			}
			a.Value = slog.AnyValue(esc)
		default:
			a.Value = v
		}
	default:
		a.Value = v
	}
	return a
}
