// Package lua holds the Redis Lua scripts that make every pool and session mutation
// atomic: one file per script, and lib/ the helpers a script declares it includes.
// The Go store that loads and runs them is package redisstore.
package lua

import "embed"

// Files are the scripts (*.lua) and their includes (lib/*.lua).
//
//go:embed *.lua lib/*.lua
var Files embed.FS
