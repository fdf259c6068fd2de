// Package dat is a Go implementation of the DAT (uDAPL) consumer API: the
// Direct Access Transport endpoint model that RDMA applications program
// against, whatever the fabric.
//
// The objects are those of DAT 2.0 and the behaviour is that of the DAT
// 1.2 man pages (dat_ep_create, dat_ep_create_with_srq, dat_ep_modify,
// dat_ep_dup_connect, ...), with the decisions recorded in the project's
// spec/dat-endpoint.md where the sources disagree:
//
//	IA   OpenIA, (*IA).Close          an open adapter; root of all objects
//	PZ   (*IA).CreatePZ               protection zone
//	EVD  (*IA).CreateEVD              event queue: Wait, WaitContext, Dequeue
//	EP   (*IA).CreateEP[WithSRQ]      endpoint and its state machine
//	LMR  (*IA).CreateLMR              registered memory
//	SRQ  (*IA).CreateSRQ              shared receive queue
//	PSP  (*IA).CreatePSP[Any]         listener; requests arrive as CRs
//	RSP  (*IA).CreateRSP              one-shot listener bound to an EP
//	CR   Event.CR.CR                  a pending request: Accept, Reject
//
// A DAT handle is a pointer here. Using a nil, freed or closed object gives
// DAT_INVALID_HANDLE with the subtype naming the object, as the C API does
// for a stale handle. Every failure is an *Error carrying the DAT_RETURN
// code; errors.Is matches it against the Err* sentinels.
//
// Providers plug in underneath through package dat/driver, as database
// drivers do under database/sql. The pure-Go iWARP provider ("iwarp") is
// built in and is the default; the cgo verbs provider ("verbs") is
// included when building with -tags verbs. IA names resolve through a
// registry file in DAPL's dat.conf format (see RegistryEntry).
package dat
