// Package dc is the dynamically-connected transport of mlx5kit: DC initiators
// (DCI) that reach any DC target (DCT) by its number and DC access key, and
// DCTs that receive through a shared receive queue.
//
// It is being built; until this comment changes the package exports nothing.
package dc
