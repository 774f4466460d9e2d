// Package deploy holds no code of its own: its tests check the files under
// deploy/ and the repository's Dockerfile, offline.
package deploy
