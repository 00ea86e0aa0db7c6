package main

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
)

// pprofServer serves Go's profiles (/debug/pprof/) on addr (PPROF_ADDR),
// on a listener of its own so that they are never reachable where the api
// is: /debug/pprof/heap?gc=1 collects garbage first and gives the live
// heap (its debug=1 text ends with the runtime's memory statistics).
func pprofServer(addr string, logger *slog.Logger) *sideServer {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return &sideServer{name: "pprof", setting: "PPROF_ADDR", addr: addr, handler: mux, logger: logger}
}
