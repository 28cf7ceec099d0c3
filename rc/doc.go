// Package rc is the reliable-connected transport of mlx5kit: create an RC
// queue pair from a ProtectionDomain and completion queues, connect it to a
// remote endpoint (QPN, LID or GID, PSN, MTU), post work requests through the
// typed stages of package wqebuilder, and post receives.
//
// It is being built; until this comment changes the package exports nothing.
package rc
