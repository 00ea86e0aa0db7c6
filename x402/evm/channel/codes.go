package channel

// Reasons a batch-settlement payment is refused: the error codes of the
// scheme's EVM specification and of the official @x402/evm packages,
// spelled as they spell them. A refusal carries one as x402.Refusal.Reason;
// the api answers it as the 402's "error".
const (
	ReasonScheme                        = "invalid_batch_settlement_evm_scheme"
	ReasonNetworkMismatch               = "invalid_batch_settlement_evm_network_mismatch"
	ReasonPayloadType                   = "invalid_batch_settlement_evm_payload_type"
	ReasonDepositPayload                = "invalid_batch_settlement_evm_deposit_payload"
	ReasonVoucherPayload                = "invalid_batch_settlement_evm_voucher_payload"
	ReasonRefundPayload                 = "invalid_batch_settlement_evm_refund_payload"
	ReasonClaimPayload                  = "invalid_batch_settlement_evm_claim_payload"
	ReasonSettlePayload                 = "invalid_batch_settlement_evm_settle_payload"
	ReasonUnknownSettleAction           = "invalid_batch_settlement_evm_unknown_settle_action"
	ReasonChannelIDInvalid              = "invalid_batch_settlement_evm_channel_id_invalid"
	ReasonChannelIDMismatch             = "invalid_batch_settlement_evm_channel_id_mismatch"
	ReasonReceiverMismatch              = "invalid_batch_settlement_evm_receiver_mismatch"
	ReasonReceiverAuthorizerMismatch    = "invalid_batch_settlement_evm_receiver_authorizer_mismatch"
	ReasonAuthorizerAddressMismatch     = "invalid_batch_settlement_evm_authorizer_address_mismatch"
	ReasonAuthorizerNotConfigured       = "invalid_batch_settlement_evm_authorizer_not_configured"
	ReasonTokenMismatch                 = "invalid_batch_settlement_evm_token_mismatch"
	ReasonWithdrawDelayMismatch         = "invalid_batch_settlement_evm_withdraw_delay_mismatch"
	ReasonWithdrawDelayOutOfRange       = "invalid_batch_settlement_evm_withdraw_delay_out_of_range"
	ReasonMissingEIP712Domain           = "invalid_batch_settlement_evm_missing_eip712_domain"
	ReasonVoucherSignature              = "invalid_batch_settlement_evm_voucher_signature"
	ReasonChannelNotFound               = "invalid_batch_settlement_evm_channel_not_found"
	ReasonMissingChannel                = "invalid_batch_settlement_evm_missing_channel"
	ReasonCumulativeExceedsBalance      = "invalid_batch_settlement_evm_cumulative_exceeds_balance"
	ReasonCumulativeBelowClaimed        = "invalid_batch_settlement_evm_cumulative_below_claimed"
	ReasonCumulativeAmountMismatch      = "invalid_batch_settlement_evm_cumulative_amount_mismatch"
	ReasonChargeExceedsSignedCumulative = "invalid_batch_settlement_evm_charge_exceeds_signed_cumulative"
	ReasonChannelBusy                   = "invalid_batch_settlement_evm_channel_busy"
	ReasonVerificationStateUnavailable  = "invalid_batch_settlement_evm_verification_state_unavailable"
	ReasonChannelStateReadFailed        = "invalid_batch_settlement_evm_channel_state_read_failed"
	ReasonRPCReadFailed                 = "invalid_batch_settlement_evm_rpc_read_failed"
	ReasonInsufficientBalance           = "invalid_batch_settlement_evm_insufficient_balance"
	ReasonDepositBelowMinDeposit        = "invalid_batch_settlement_evm_deposit_below_min_deposit"
	ReasonERC3009AuthorizationRequired  = "invalid_batch_settlement_evm_erc3009_authorization_required"
	ReasonValidAfter                    = "invalid_batch_settlement_evm_payload_authorization_valid_after"
	ReasonValidBefore                   = "invalid_batch_settlement_evm_payload_authorization_valid_before"
	ReasonReceiveAuthorizationSignature = "invalid_batch_settlement_evm_receive_authorization_signature"
	ReasonFactoryNotAllowed             = "invalid_batch_settlement_evm_eip6492_factory_not_allowed"
	ReasonSmartWalletDeploymentFailed   = "invalid_batch_settlement_evm_smart_wallet_deployment_failed"
	ReasonPermit2AuthorizationRequired  = "invalid_batch_settlement_evm_permit2_authorization_required"
	ReasonPermit2InvalidSpender         = "invalid_batch_settlement_evm_permit2_invalid_spender"
	ReasonPermit2AmountMismatch         = "invalid_batch_settlement_evm_permit2_amount_mismatch"
	ReasonPermit2DeadlineExpired        = "invalid_batch_settlement_evm_permit2_deadline_expired"
	ReasonPermit2InvalidSignature       = "invalid_batch_settlement_evm_permit2_invalid_signature"
	ReasonPermit2AllowanceRequired      = "invalid_batch_settlement_evm_permit2_allowance_required"
	ReasonEIP2612AmountMismatch         = "invalid_batch_settlement_evm_eip2612_amount_mismatch"
	ReasonERC20ApprovalUnavailable      = "invalid_batch_settlement_evm_erc20_approval_unavailable"
	ReasonDepositSimulationFailed       = "invalid_batch_settlement_evm_deposit_simulation_failed"
	ReasonDepositTransactionFailed      = "invalid_batch_settlement_evm_deposit_transaction_failed"
	ReasonClaimSimulationFailed         = "invalid_batch_settlement_evm_claim_simulation_failed"
	ReasonClaimTransactionFailed        = "invalid_batch_settlement_evm_claim_transaction_failed"
	ReasonSettleSimulationFailed        = "invalid_batch_settlement_evm_settle_simulation_failed"
	ReasonSettleTransactionFailed       = "invalid_batch_settlement_evm_settle_transaction_failed"
	ReasonNothingToSettle               = "invalid_batch_settlement_evm_nothing_to_settle"
	ReasonRefundAmountInvalid           = "invalid_batch_settlement_evm_refund_amount_invalid"
	ReasonRefundNoBalance               = "invalid_batch_settlement_evm_refund_no_balance"
	ReasonRefundSimulationFailed        = "invalid_batch_settlement_evm_refund_simulation_failed"
	ReasonRefundTransactionFailed       = "invalid_batch_settlement_evm_refund_transaction_failed"
	ReasonTransactionReverted           = "invalid_batch_settlement_evm_transaction_reverted"
	ReasonWaitForReceiptFailed          = "invalid_batch_settlement_evm_wait_for_receipt_failed"
)

// ReasonPayerCodeRefused is x402d's own reason, beside the spec's, of a
// voucher or deposit that a contract wallet's code would check, when that
// wallet's code made a claim of this seller fail after it accepted the
// channel's vouchers (or a settlement fail, as the exact scheme's
// invalid_exact_evm_payer_code_refused): its payments are refused, before
// their signatures are checked, until its refusal (PAYER_CODE_REFUSE_FOR)
// ends.
const ReasonPayerCodeRefused = "invalid_batch_settlement_evm_payer_code_refused"

// Corrective reports whether a refusal's reason asks for the corrective 402:
// the client's cumulative amount is not the seller's, and the 402's
// batch-settlement option carries extra.channelState and
// extra.voucherState for it to resynchronize. The official client
// resynchronizes on these two reasons.
func Corrective(reason string) bool {
	return reason == ReasonCumulativeAmountMismatch || reason == ReasonCumulativeBelowClaimed
}
