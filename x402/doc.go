// Package x402 is the payment protocol of the service: x402 v2's types and
// headers, the quotes of the catalogue, and the seller that verifies a
// payment against its own requirement and hands it to the settler of its
// network. It knows an operation only by the Offer the catalogue hands it
// (jobs.Spec.Offer: name, price, description, examples, input schema) and
// imports no package of the service above it. The schemes live below it: evm (EIP-3009 on EVM networks, and
// the relayer that settles), svm (Solana), devchain (the embedded
// development chain), facilitator (a remote facilitator) and payclient (a
// paying client).
//
// # A paid call
//
// An unpaid request is answered 402 with the quote in the PAYMENT-REQUIRED
// header (base64 JSON PaymentRequired) and WWW-Authenticate; the body is not
// read. The caller signs one of the quote's accepts and repeats the request
// with PAYMENT-SIGNATURE. Bad input with a payment is answered 400
// invalid_request naming the field, and nothing is charged. A valid payment
// is recorded with the call and its job in one transaction; the request
// waits up to CALL_WAIT for the result (200 with PAYMENT-RESPONSE) or
// answers 202 with a poll URL whose token is a capability. An operation that
// failed is answered 502 operation_failed and its payment is never settled.
// An operation's retries and its settlement fit inside the payment's
// validBefore: an attempt that could not end a margin before it
// (worker.Config.ExpiryMargin) is not made, and the call ends 502
// payment_expired, not settled; the relayer sends no transfer within
// evm.RelayerConfig.ExpiryMargin of validBefore. The same payment with the same request
// returns the stored result (a safe retry); with another request it is
// refused payment_already_used. After RESULT_TTL the poll URL and the
// payment answer 410 result_expired.
//
// Every quote declares the payment-identifier extension, not required (as
// the official declarePaymentIdentifierExtension(false)). A payment carrying
// an id (extensions["payment-identifier"].info.id, 16 to 128 of
// [A-Za-z0-9_-]; anything else is 400 invalid_payment_identifier before any
// check) binds it, scoped by its payer, to the call it pays for. A later
// payment of the same payer with the same id is answered as the same payment
// sent again is: the call's stored result and PAYMENT-RESPONSE, or the call
// running, for the same operation, body and network; 409
// payment_identifier_conflict for another request. Such a payment, when it
// is not the call's own, is authenticated only (Verifier.Authenticate: its
// match to the quote and its payer's signature, and that it paid no other
// call), never verified as a charge, reserved or settled: the client whose
// answer was lost and who signed again is charged once.
//
// # Payment channels (batch-settlement)
//
// Where the relayer settles (SETTLEMENT=devchain or rpc) and a receiver
// authorizer key is configured (RECEIVER_AUTHORIZER_KEY; on the devchain
// its account #10 by default), every EVM network's exact option is followed
// in accepts, after all the exact ones, by a batch-settlement option at the
// same price, asset and payTo, whose extra is the official server's: the
// token's EIP-712 name and version, receiverAuthorizer, withdrawDelay
// (CHANNEL_WITHDRAW_DELAY) and minDeposit (ten prices, a hint). A payer
// deposits once into a channel (an EIP-3009 receiveWithAuthorization
// through the canonical deposit collector, which the relayer sends once
// the first call's operation succeeded, and follows until final as an
// exact settlement), then pays each call with a cumulative voucher,
// checked against the channel's record in Postgres (package evm/chanpay,
// store.Channel) and charged off chain: the charge is appended with the
// call's settlement, before its result is released (PAYMENT-RESPONSE:
// transaction "" for a voucher, extra.chargedAmount, extra.channelState).
// A voucher whose cumulative amount is not the seller's charge plus the
// price is answered the corrective 402, its option carrying
// extra.channelState and extra.voucherState (the official client
// resynchronizes from it); a second call of a channel while one runs is
// refused invalid_batch_settlement_evm_channel_busy; a failed operation
// charges nothing and frees the voucher for another call; the same voucher
// and request get the stored result. A channel the seller has no record
// of is taken up from the chain, charged what was claimed there. GET on
// an operation's URL answers its quote, and, with a refund payload, has
// the cooperative refund of what the channel holds beyond the charge made
// (refundWithSignature, signed by the receiver authorizer, sent by the
// relayer) by a worker's job, whose outcome the request waits for
// (PendingRefund). Claims of vouchers and the sweep to payTo are the
// workers'.
//
// # Settlement modes
//
// SETTLEMENT=devchain (the default) settles on the embedded chain of package
// devchain, served over JSON-RPC on DEVCHAIN_RPC_ADDR so that wallets and
// other processes (x402d api and x402d worker beside x402d devchain) share
// it; its settlements share transactions through its Multicall3-compatible
// contract unless SETTLEMENT_BATCH=off.
//
// SETTLEMENT=rpc settles on real chains through RPC_URL_<CHAIN>, RELAYER_KEY
// paying gas: one transaction per payment, or in batches through the
// chain's Multicall3 with SETTLEMENT_BATCH=on (the service refuses to start
// if a chain has none there). Any number of worker processes share one
// RELAYER_KEY: each nonce is handed out once by Postgres and its signed
// transaction recorded before it is sent, until the chain mines that nonce.
// A send that got no answer is sent again, never abandoned; a transaction
// left unmined is replaced with higher fees; a nonce found used by another
// transaction is given up for a new one; a nonce whose process died is sent
// again from its record or filled with a transfer of nothing; and the
// transactions from the first nonce the node says it lacks are given to it
// again, so no nonce stays a gap that would hold every later one. While
// settlements wait for their receipts the relayer reads each chain's head at
// the chain's pace, and each new block's receipts once. A batch asks for at
// most SETTLEMENT_BATCH_GAS_SHARE of a block's gas; with
// SETTLEMENT_MAX_FEE_GWEI set, no transaction offers more per gas, and
// settlements wait while the base fee is above it. A settlement is then
// followed until final (FINALITY_<CHAIN>), and made again if a
// reorganisation undoes it (docs/operating.md).
//
// SETTLEMENT=facilitator has a remote facilitator verify and settle. With
// RPC_URL_<CHAIN> set too, a settlement whose answer was lost is found on
// chain when the facilitator refuses the retry as nonce_already_used, and
// the result is delivered.
//
// # Verification
//
// Verification checks every rule of the exact scheme against the seller's
// own requirement (the signature by EIP-712 with the token's domain, the
// receiver, the exact amount, the asset, the network, the time window, the
// balance and nonce state on chain, and a simulation of the transfer), and
// refuses with the official reason strings. Every check that needs no chain
// runs first, so that a payment they refuse costs no RPC call and no
// database read. A payer found unable to pay is refused again from memory
// for a few seconds, and past REFUSED_PAYMENTS_BURST refusals after a chain
// read a client address is answered 429 rate_limited (its payments that
// verify never count). Verification's RPC calls give way to settlement's on
// each chain (VERIFY_RPC_CONCURRENCY).
//
// Work costs the payer something before it runs. An EVM payment must stay
// valid, after its verification, for the operation's time budget and the
// settlement window (JOB_TIMEOUT plus SETTLEMENT_WINDOW; the quotes'
// maxTimeoutSeconds, which the official clients sign with, leaves a minute
// more), or it is refused invalid_exact_evm_payload_authorization_valid_before
// before any work. An EVM payment the service verifies itself (not through a
// facilitator) is reserved against its payer's balance in the transaction
// that admits its call (store.Reserve): the
// payer's payments of one asset on one network in flight (verified, not yet
// settled or refused), in any api process, never sum to more than the chain
// showed the payer to hold, and a payment past it is refused 402
// insufficient_funds with nothing queued. The balance is read only while the
// payer has other payments in flight, at most once in a few seconds per api
// process (PurposeReserve in evm). A Solana payment is reserved the same way
// against the balance of the token account its transfer moves funds from
// (getTokenAccountBalance at confirmed, svm.Verifier.Balance), for as long
// as its transaction may land: until its blockhash dies with a block every
// other slot (Payment.ReserveUntil), while its run and settlement end by
// its ValidBefore, when the blockhash dies at the fastest. Its validity is
// the blockhash's own (about a minute), which the EVM window above does not
// refuse.
//
// Smart-contract wallets pay as the official facilitator accepts them: a
// deployed wallet's signature is checked by the wallet (EIP-1271), and a
// wallet not deployed yet signs with ERC-6492: verification simulates the
// deployment and the transfer in one eth_call through Multicall3, and
// settlement sends both in one transaction, so that the wallet exists and
// has paid, or neither (EIP6492_FACTORIES bounds the factories).
//
// Solana USDC is offered when PAY_TO_SOLANA, SOLANA_FEE_PAYER_KEY and
// RPC_URL_SOLANA are all set: the payer's partially signed transaction is
// checked, co-signed by the fee payer, sent and confirmed (package svm).
// Quotes never offer an option the service cannot settle.
package x402
