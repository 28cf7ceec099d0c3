// Package qpstate is the table of queue pair state transitions a ConnectX
// accepts through the Linux kernel, per QP type (RC, UD, DCI, DCT), with
// the attribute masks each transition requires and allows. Both providers
// consult it before a modify: the hardware provider (package cgo) derives
// the ibv_modify_qp attribute mask from it and refuses what the kernel
// would refuse without calling the verb, and the software HCA (package sim)
// refuses the same transitions with the same error number, so a program
// that runs on the model does not meet a refusal first on a NIC.
//
// The table is written from these kernel sources (Linux,
// drivers/infiniband):
//
//   - RC and UD: core/verbs.c, ib_modify_qp_is_ok and its qp_state_table
//     (which transitions exist and their required and optional masks),
//     called from mlx5_ib_modify_qp in hw/mlx5/qp.c; then the optab of
//     __mlx5_ib_modify_qp in hw/mlx5/qp.c, which maps a transition to a
//     firmware command and refuses one it has no command for (RTS→SQD has
//     none, so a QP never reaches SQD through mlx5_ib).
//   - DCI: modify_dci_qp_is_ok in hw/mlx5/qp.c, which replaces
//     ib_modify_qp_is_ok for DC initiators.
//   - DCT: mlx5_ib_modify_dct in hw/mlx5/qp.c, which accepts RESET→INIT
//     and INIT→RTR and nothing else (the DCT is created in the device at
//     RTR; ERR and RESET do not exist for it: it is destroyed instead).
//
// Where kernels differ, the table keeps what every one of them accepts:
// later kernels let a DCI move to RESET and take an address vector at RTR
// (modify_dci_qp_is_ok gained a RESET branch and IB_QP_AV as optional), and
// added an SQD→RTS command to optab; older kernels refuse all three, so the
// table does too (Rule.Newer says so).
//
// Every refusal of the table is EINVAL, which is what the kernel returns
// for a transition it has no entry for and for a mask with a required bit
// missing or a bit it does not allow. mlx5_ib returns EOPNOTSUPP from a
// modify only for what does not depend on the transition: attribute mask
// bits outside the standard set (the kit never sends them), remote atomic
// access on a device or QP type without atomics (a device capability), and
// driver data it does not know; none of these is a verdict of this table.
//
// Past the table, CheckAttr refuses the attribute values the kernel refuses
// against the device's limits (Limits: the port count, P_Key and GID
// tables, read/atomic depths) and the path MTU range, with the same EINVAL
// and an AttrError that names the attribute, its value and the limit.
package qpstate

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// Mask is a set of verbs attribute mask bits (enum ibv_qp_attr_mask, the
// same values as the kernel's enum ib_qp_attr_mask).
type Mask uint32

// Attribute mask bits.
const (
	State            Mask = 1 << 0  // IBV_QP_STATE
	CurState         Mask = 1 << 1  // IBV_QP_CUR_STATE
	EnSQDAsyncNotify Mask = 1 << 2  // IBV_QP_EN_SQD_ASYNC_NOTIFY
	AccessFlags      Mask = 1 << 3  // IBV_QP_ACCESS_FLAGS
	PKeyIndex        Mask = 1 << 4  // IBV_QP_PKEY_INDEX
	Port             Mask = 1 << 5  // IBV_QP_PORT
	QKey             Mask = 1 << 6  // IBV_QP_QKEY
	AV               Mask = 1 << 7  // IBV_QP_AV
	PathMTU          Mask = 1 << 8  // IBV_QP_PATH_MTU
	Timeout          Mask = 1 << 9  // IBV_QP_TIMEOUT
	RetryCount       Mask = 1 << 10 // IBV_QP_RETRY_CNT
	RNRRetry         Mask = 1 << 11 // IBV_QP_RNR_RETRY
	RQPSN            Mask = 1 << 12 // IBV_QP_RQ_PSN
	MaxQPRdAtomic    Mask = 1 << 13 // IBV_QP_MAX_QP_RD_ATOMIC
	AltPath          Mask = 1 << 14 // IBV_QP_ALT_PATH
	MinRNRTimer      Mask = 1 << 15 // IBV_QP_MIN_RNR_TIMER
	SQPSN            Mask = 1 << 16 // IBV_QP_SQ_PSN
	MaxDestRdAtomic  Mask = 1 << 17 // IBV_QP_MAX_DEST_RD_ATOMIC
	PathMigState     Mask = 1 << 18 // IBV_QP_PATH_MIG_STATE
	Cap              Mask = 1 << 19 // IBV_QP_CAP
	DestQPN          Mask = 1 << 20 // IBV_QP_DEST_QPN
)

var maskNames = [...]string{
	"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX",
	"PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY",
	"RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN",
	"MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN",
}

// String lists the bits by their verbs names without the IBV_QP_ prefix,
// e.g. "STATE|AV|PATH_MTU"; "0" for the empty set.
func (m Mask) String() string {
	if m == 0 {
		return "0"
	}
	var parts []string
	for i, n := range maskNames {
		if m&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	if rest := m &^ (1<<len(maskNames) - 1); rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(rest)))
	}
	return strings.Join(parts, "|")
}

// Rule is the table's verdict on one transition of one QP type.
type Rule struct {
	// Legal reports whether every kernel the table covers accepts the
	// transition (with a mask that has Required and nothing outside
	// State|Required|Optional).
	Legal bool
	// Required are the attributes the transition must carry besides
	// State; Optional those it may carry.
	Required, Optional Mask
	// Errno is what ibv_modify_qp returns for the transition when it is
	// not Legal (EINVAL); 0 when it is.
	Errno syscall.Errno
	// Source names the kernel check that decides, as file and function.
	Source string
	// Why says, for an illegal transition, what in Source refuses it.
	Why string
	// Newer says what later kernels accept beyond this rule ("" when they
	// agree with it).
	Newer string
}

// Kernel sources the rules cite.
const (
	srcCore  = "drivers/infiniband/core/verbs.c ib_modify_qp_is_ok (qp_state_table)"
	srcOptab = "drivers/infiniband/hw/mlx5/qp.c __mlx5_ib_modify_qp (optab)"
	srcDCI   = "drivers/infiniband/hw/mlx5/qp.c modify_dci_qp_is_ok"
	srcDCT   = "drivers/infiniband/hw/mlx5/qp.c mlx5_ib_modify_dct"
	srcType  = "drivers/infiniband/hw/mlx5/qp.c mlx5_ib_modify_qp"
)

// QPTypes are the types the table covers, and States the states (enum
// ibv_qp_state order), for callers that walk it.
var (
	QPTypes = []ctx.QPType{ctx.QPTypeRC, ctx.QPTypeUD, ctx.QPTypeDCI, ctx.QPTypeDCT}
	States  = []ctx.QPState{ctx.QPStateReset, ctx.QPStateInit, ctx.QPStateRTR, ctx.QPStateRTS,
		ctx.QPStateSQD, ctx.QPStateSQE, ctx.QPStateError}
)

type edge struct{ from, to ctx.QPState }

type masks struct{ req, opt Mask }

// coreRC and coreUD are the entries of qp_state_table for RC and UD: the
// transitions ib_modify_qp_is_ok knows, with their required and optional
// masks for the type.
var coreRC = map[edge]masks{
	{ctx.QPStateReset, ctx.QPStateReset}: {},
	{ctx.QPStateReset, ctx.QPStateInit}:  {req: PKeyIndex | Port | AccessFlags},
	{ctx.QPStateInit, ctx.QPStateReset}:  {},
	{ctx.QPStateInit, ctx.QPStateError}:  {},
	{ctx.QPStateInit, ctx.QPStateInit}:   {opt: PKeyIndex | Port | AccessFlags},
	{ctx.QPStateInit, ctx.QPStateRTR}: {
		req: AV | PathMTU | DestQPN | RQPSN | MaxDestRdAtomic | MinRNRTimer,
		opt: AltPath | AccessFlags | PKeyIndex},
	{ctx.QPStateRTR, ctx.QPStateReset}: {},
	{ctx.QPStateRTR, ctx.QPStateError}: {},
	{ctx.QPStateRTR, ctx.QPStateRTS}: {
		req: Timeout | RetryCount | RNRRetry | SQPSN | MaxQPRdAtomic,
		opt: CurState | AltPath | AccessFlags | MinRNRTimer | PathMigState},
	{ctx.QPStateRTS, ctx.QPStateReset}: {},
	{ctx.QPStateRTS, ctx.QPStateError}: {},
	{ctx.QPStateRTS, ctx.QPStateRTS}:   {opt: CurState | AccessFlags | AltPath | PathMigState | MinRNRTimer},
	{ctx.QPStateRTS, ctx.QPStateSQD}:   {opt: EnSQDAsyncNotify},
	{ctx.QPStateSQD, ctx.QPStateReset}: {},
	{ctx.QPStateSQD, ctx.QPStateError}: {},
	{ctx.QPStateSQD, ctx.QPStateRTS}:   {opt: CurState | AltPath | AccessFlags | MinRNRTimer | PathMigState},
	{ctx.QPStateSQD, ctx.QPStateSQD}: {opt: Port | AV | Timeout | RetryCount | RNRRetry | MaxQPRdAtomic |
		MaxDestRdAtomic | AltPath | AccessFlags | PKeyIndex | MinRNRTimer | PathMigState},
	{ctx.QPStateSQE, ctx.QPStateReset}:   {},
	{ctx.QPStateSQE, ctx.QPStateError}:   {},
	{ctx.QPStateSQE, ctx.QPStateRTS}:     {},
	{ctx.QPStateError, ctx.QPStateReset}: {},
	{ctx.QPStateError, ctx.QPStateError}: {},
}

var coreUD = map[edge]masks{
	{ctx.QPStateReset, ctx.QPStateReset}: {},
	{ctx.QPStateReset, ctx.QPStateInit}:  {req: PKeyIndex | Port | QKey},
	{ctx.QPStateInit, ctx.QPStateReset}:  {},
	{ctx.QPStateInit, ctx.QPStateError}:  {},
	{ctx.QPStateInit, ctx.QPStateInit}:   {opt: PKeyIndex | Port | QKey},
	{ctx.QPStateInit, ctx.QPStateRTR}:    {opt: PKeyIndex | QKey},
	{ctx.QPStateRTR, ctx.QPStateReset}:   {},
	{ctx.QPStateRTR, ctx.QPStateError}:   {},
	{ctx.QPStateRTR, ctx.QPStateRTS}:     {req: SQPSN, opt: CurState | QKey},
	{ctx.QPStateRTS, ctx.QPStateReset}:   {},
	{ctx.QPStateRTS, ctx.QPStateError}:   {},
	{ctx.QPStateRTS, ctx.QPStateRTS}:     {opt: CurState | QKey},
	{ctx.QPStateRTS, ctx.QPStateSQD}:     {opt: EnSQDAsyncNotify},
	{ctx.QPStateSQD, ctx.QPStateReset}:   {},
	{ctx.QPStateSQD, ctx.QPStateError}:   {},
	{ctx.QPStateSQD, ctx.QPStateRTS}:     {opt: CurState | QKey},
	{ctx.QPStateSQD, ctx.QPStateSQD}:     {opt: PKeyIndex | QKey},
	{ctx.QPStateSQE, ctx.QPStateReset}:   {},
	{ctx.QPStateSQE, ctx.QPStateError}:   {},
	{ctx.QPStateSQE, ctx.QPStateRTS}:     {opt: CurState | QKey},
	{ctx.QPStateError, ctx.QPStateReset}: {},
	{ctx.QPStateError, ctx.QPStateError}: {},
}

// coreUC is qp_state_table's entries for UC: RC's transitions without
// the attributes of acknowledgement, retry and RDMA READ/atomic depth
// (no MAX_DEST_RD_ATOMIC or MIN_RNR_TIMER at RTR, only SQ_PSN at RTS).
var coreUC = map[edge]masks{
	{ctx.QPStateReset, ctx.QPStateReset}: {},
	{ctx.QPStateReset, ctx.QPStateInit}:  {req: PKeyIndex | Port | AccessFlags},
	{ctx.QPStateInit, ctx.QPStateReset}:  {},
	{ctx.QPStateInit, ctx.QPStateError}:  {},
	{ctx.QPStateInit, ctx.QPStateInit}:   {opt: PKeyIndex | Port | AccessFlags},
	{ctx.QPStateInit, ctx.QPStateRTR}: {
		req: AV | PathMTU | DestQPN | RQPSN,
		opt: AltPath | AccessFlags | PKeyIndex},
	{ctx.QPStateRTR, ctx.QPStateReset}: {},
	{ctx.QPStateRTR, ctx.QPStateError}: {},
	{ctx.QPStateRTR, ctx.QPStateRTS}: {
		req: SQPSN,
		opt: CurState | AltPath | AccessFlags | PathMigState},
	{ctx.QPStateRTS, ctx.QPStateReset}:   {},
	{ctx.QPStateRTS, ctx.QPStateError}:   {},
	{ctx.QPStateRTS, ctx.QPStateRTS}:     {opt: CurState | AccessFlags | AltPath | PathMigState},
	{ctx.QPStateRTS, ctx.QPStateSQD}:     {opt: EnSQDAsyncNotify},
	{ctx.QPStateSQD, ctx.QPStateReset}:   {},
	{ctx.QPStateSQD, ctx.QPStateError}:   {},
	{ctx.QPStateSQD, ctx.QPStateRTS}:     {opt: CurState | AltPath | AccessFlags | PathMigState},
	{ctx.QPStateSQD, ctx.QPStateSQD}:     {opt: AV | AltPath | AccessFlags | PKeyIndex | PathMigState},
	{ctx.QPStateSQE, ctx.QPStateReset}:   {},
	{ctx.QPStateSQE, ctx.QPStateError}:   {},
	{ctx.QPStateSQE, ctx.QPStateRTS}:     {opt: CurState | AccessFlags},
	{ctx.QPStateError, ctx.QPStateReset}: {},
	{ctx.QPStateError, ctx.QPStateError}: {},
}

// optab is the set of transitions __mlx5_ib_modify_qp has a firmware
// command for, on every kernel: to RESET and to ERR from any state,
// RESET→INIT, INIT→INIT, INIT→RTR, RTR→RTS, RTS→RTS and SQE→RTS. There is
// no RTS→SQD; SQD→RTS exists only in later kernels (optabNewer).
var optab = func() map[edge]bool {
	m := map[edge]bool{}
	for _, s := range States {
		m[edge{s, ctx.QPStateReset}] = true
		m[edge{s, ctx.QPStateError}] = true
	}
	for _, e := range []edge{
		{ctx.QPStateReset, ctx.QPStateInit},
		{ctx.QPStateInit, ctx.QPStateInit},
		{ctx.QPStateInit, ctx.QPStateRTR},
		{ctx.QPStateRTR, ctx.QPStateRTS},
		{ctx.QPStateRTS, ctx.QPStateRTS},
		{ctx.QPStateSQE, ctx.QPStateRTS},
	} {
		m[e] = true
	}
	return m
}()

var optabNewer = edge{ctx.QPStateSQD, ctx.QPStateRTS}

// dciRules are the branches of modify_dci_qp_is_ok as the first DC kernels
// have them: no transition to RESET, and no IB_QP_AV at RTR.
var dciRules = map[edge]masks{
	{ctx.QPStateReset, ctx.QPStateInit}: {req: PKeyIndex | Port},
	{ctx.QPStateInit, ctx.QPStateInit}:  {opt: PKeyIndex | Port},
	{ctx.QPStateInit, ctx.QPStateRTR}:   {req: PathMTU, opt: PKeyIndex},
	{ctx.QPStateRTR, ctx.QPStateRTS}: {
		req: Timeout | RetryCount | RNRRetry | MaxQPRdAtomic | SQPSN,
		opt: MinRNRTimer},
	{ctx.QPStateRTS, ctx.QPStateRTS}: {opt: MinRNRTimer},
	// Any state but RESET to ERR.
	{ctx.QPStateInit, ctx.QPStateError}:  {},
	{ctx.QPStateRTR, ctx.QPStateError}:   {},
	{ctx.QPStateRTS, ctx.QPStateError}:   {},
	{ctx.QPStateSQD, ctx.QPStateError}:   {},
	{ctx.QPStateSQE, ctx.QPStateError}:   {},
	{ctx.QPStateError, ctx.QPStateError}: {},
}

// dctRules are the two transitions mlx5_ib_modify_dct accepts.
var dctRules = map[edge]masks{
	{ctx.QPStateReset, ctx.QPStateInit}: {req: AccessFlags | PKeyIndex | Port},
	{ctx.QPStateInit, ctx.QPStateRTR}:   {req: MinRNRTimer | AV | PathMTU},
}

func valid(s ctx.QPState) bool { return s <= ctx.QPStateError }

// Lookup returns the table's rule for moving a QP of type t from one
// state to another.
func Lookup(t ctx.QPType, from, to ctx.QPState) Rule {
	illegal := func(src, why string) Rule {
		return Rule{Errno: syscall.EINVAL, Source: src, Why: why}
	}
	if !valid(from) || !valid(to) {
		return illegal(srcType, "no such QP state")
	}
	e := edge{from, to}
	switch t {
	case ctx.QPTypeRC, ctx.QPTypeUD:
		core := coreRC
		if t == ctx.QPTypeUD {
			core = coreUD
		}
		return lookupCore(core, e)
	case ctx.QPTypeDCI:
		if m, ok := dciRules[e]; ok {
			r := Rule{Legal: true, Required: m.req, Optional: m.opt, Source: srcDCI}
			if e == (edge{ctx.QPStateInit, ctx.QPStateRTR}) {
				r.Newer = "later kernels also allow AV"
			}
			return r
		}
		r := illegal(srcDCI, "no branch for it")
		if to == ctx.QPStateReset {
			r.Newer = "later kernels accept any state to RESET (STATE only)"
		}
		return r
	case ctx.QPTypeDCT:
		if m, ok := dctRules[e]; ok {
			return Rule{Legal: true, Required: m.req, Source: srcDCT}
		}
		return illegal(srcDCT, "a DCT only goes RESET→INIT→RTR; destroy it instead")
	}
	return illegal(srcType, "QP type not covered")
}

// lookupCore is the rule of qp_state_table (core) and optab for e.
func lookupCore(core map[edge]masks, e edge) Rule {
	illegal := func(src, why string) Rule {
		return Rule{Errno: syscall.EINVAL, Source: src, Why: why}
	}
	m, ok := core[e]
	switch {
	case !ok:
		return illegal(srcCore, "qp_state_table has no such transition")
	case e == optabNewer:
		r := illegal(srcOptab, "optab has no SQD→RTS command")
		r.Newer = "later kernels have an SQD→RTS command (a QP still never reaches SQD: there is no RTS→SQD)"
		return r
	case !optab[e]:
		return illegal(srcOptab, "optab has no firmware command for it")
	}
	return Rule{Legal: true, Required: m.req, Optional: m.opt, Source: srcCore + "; " + srcOptab}
}

// LookupUC is Lookup for a UC QP, which mlx5_ib takes as it takes RC
// (the same optab) with qp_state_table's UC masks.
func LookupUC(from, to ctx.QPState) Rule {
	if !valid(from) || !valid(to) {
		return Rule{Errno: syscall.EINVAL, Source: srcType, Why: "no such QP state"}
	}
	return lookupCore(coreUC, edge{from, to})
}

// CheckUC is Check for a UC QP (LookupUC). Its *Error names the type RC,
// the model's type of a UC QP, and says UC in its reason.
func CheckUC(from, to ctx.QPState, m Mask) error {
	return check(LookupUC(from, to), ctx.QPTypeRC, "UC: ", from, to, m)
}

// Error is a modify the table refuses: the transition, the mask, and the
// error number the kernel returns. errors.Is matches the errno and a ctx
// sentinel: ctx.ErrInvalidState for a transition that does not exist,
// ctx.ErrInvalidArgument for a mask that does not fit an existing one.
type Error struct {
	Type     ctx.QPType
	From, To ctx.QPState
	Mask     Mask
	Errno    syscall.Errno
	// Reason says what is wrong and which kernel check refuses it.
	Reason string
	// Transition is set when the transition itself does not exist
	// (rather than its mask being wrong).
	Transition bool
}

var _ error = (*Error)(nil)

// Error formats as "DCT RTR→ERR: <reason>: EINVAL".
func (e *Error) Error() string {
	return fmt.Sprintf("%v %v→%v: %s: %s", e.Type, e.From, e.To, e.Reason, errnoName(e.Errno))
}

// Unwrap returns the errno and the ctx sentinel.
func (e *Error) Unwrap() []error {
	s := ctx.ErrInvalidArgument
	if e.Transition {
		s = ctx.ErrInvalidState
	}
	return []error{e.Errno, s}
}

func errnoName(n syscall.Errno) string {
	switch n {
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.EOPNOTSUPP:
		return "EOPNOTSUPP"
	}
	return n.Error()
}

// Check returns nil when the kernel accepts moving a QP of type t from one
// state to another with attribute mask m, or the *Error it refuses with. A
// mask without State stands for a move to the state the QP is in (from ==
// to), which an RC, UC or UD QP may make (RTS→RTS with AccessFlags, say)
// and a DCI or DCT may not.
func Check(t ctx.QPType, from, to ctx.QPState, m Mask) error {
	return check(Lookup(t, from, to), t, "", from, to, m)
}

func check(r Rule, t ctx.QPType, prefix string, from, to ctx.QPState, m Mask) error {
	fail := func(transition bool, format string, args ...any) error {
		return &Error{Type: t, From: from, To: to, Mask: m, Errno: syscall.EINVAL, Transition: transition,
			Reason: prefix + fmt.Sprintf(format, args...)}
	}
	if !r.Legal {
		return fail(true, "%s (%s)", r.Why, r.Source)
	}
	// mlx5_ib_modify_qp takes a mask without STATE as a move to the
	// state the QP is in (ib_modify_qp_is_ok then checks cur→cur); a
	// DCI (modify_dci_qp_is_ok) and a DCT (mlx5_ib_modify_dct) need it.
	if m&State == 0 && (t == ctx.QPTypeDCI || t == ctx.QPTypeDCT || from != to) {
		return fail(false, "mask %v has no STATE (%s)", m, r.Source)
	}
	if miss := r.Required &^ m; miss != 0 {
		return fail(false, "mask %v lacks %v (%s)", m, miss, r.Source)
	}
	if extra := m &^ (State | r.Required | r.Optional); extra != 0 {
		return fail(false, "mask %v has %v, not allowed here (%s)", m, extra, r.Source)
	}
	return nil
}

// Derive returns the attribute mask the kit sends to move a QP of type t
// from one state to another, or the table's *Error when the transition is
// refused. The mask is State and the transition's required attributes;
// INIT→INIT carries the attributes RESET→INIT requires (all optional there)
// so that it re-applies them. The kit never sends an optional attribute
// otherwise: a DCI's path at RTR is not sent (older kernels refuse IB_QP_AV
// on a DCI, and each DCI WQE carries its own address vector).
func Derive(t ctx.QPType, from, to ctx.QPState) (Mask, error) {
	r := Lookup(t, from, to)
	m := State | r.Required
	if r.Legal && from == ctx.QPStateInit && to == ctx.QPStateInit {
		m |= Lookup(t, ctx.QPStateReset, ctx.QPStateInit).Required & r.Optional
	}
	if err := Check(t, from, to, m); err != nil {
		return 0, err
	}
	return m, nil
}
