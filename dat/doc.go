// Package dat is a Go implementation of the DAT (uDAPL) consumer API: the
// Direct Access Transport endpoint model that RDMA applications program
// against, whatever the fabric.
//
// The objects are those of DAT 2.0 and the behaviour is that of the DAT
// 1.2 man pages (dat_ep_create, dat_ep_create_with_srq, dat_ep_modify,
// dat_ep_dup_connect, ...), with the decisions listed below where the
// sources disagree or are silent:
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
// Beyond the DAT 1.2 calls, an EP has two extensions for fewer work
// requests per message: EP.PostRDMAWriteImm, DAT 2.0's InfiniBand
// extension dat_ib_post_rdma_write_immed (where ProviderAttr says the
// transport has it), and EP.PostSendList, several send-side requests
// checked as one and handed to the provider in one call (verbs: one
// ibv_post_send).
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
//
// # Decisions
//
// Where the man pages disagree, are silent, or differ from DAPL, the package
// decides as follows (docs/dat-decisions.md in the repository gives the
// reasons):
//
//   - A failed connection attempt leaves the EP DISCONNECTED (dat_ep_dup_connect
//     says "UNDISCONNECTED", which is no state), and an unreachable host gives
//     DAT_CONNECTION_EVENT_UNREACHABLE.
//   - A graceful disconnect of an EP already in DISCONNECT_PENDING has no
//     effect and succeeds.
//   - dat_cr_reject takes private data (the DAT 2.0 signature).
//   - dat_ep_modify: "Passive Connection (Request) Pending" is one state and
//     "quiescent" means UNCONNECTED or TENTATIVE_CONNECTION_PENDING; the
//     communicator and the SRQ never change, and the other DAT 2.0 fields
//     (SRQ soft high watermark, RDMA Read/Write IOV limits) may change in the
//     same states as the attributes the man page lists.
//   - dat_ep_modify gives DAT_INVALID_HANDLE for an invalid EP only; an
//     invalid PZ or EVD inside ep_param (freed, of another IA, or an EVD
//     without the DTO flag for a recv/request stream or the CONNECTION flag
//     for the connect stream) is DAT_INVALID_PARAMETER/DAT_INVALID_ARG3.
//     dat_ep_create and dat_ep_create_with_srq keep DAT_INVALID_HANDLE for
//     their handle arguments.
//   - An EVD created with EVDSoftware counts as fed by a software event
//     stream from its creation, so, like any EVD carrying events other than
//     DTO completions, it only takes EP completion streams with
//     DAT_COMPLETION_EVD_THRESHOLD_FLAG: create, create_with_srq and modify
//     refuse other flags with DAT_INVALID_PARAMETER. Hence EVD.PostSE never
//     meets an UNSIGNALLED or SOLICITED_WAIT stream and does not check for
//     one.
//   - Posting a Recv to an EP that receives from an SRQ gives
//     DAT_INVALID_STATE.
//   - The default RDMA Read depths are 0.
package dat
