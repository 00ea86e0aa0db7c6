// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";

/// @notice What BatchSettlement asks of a deposit collector: move amount of
/// token from payer to the settlement contract, however the collector's
/// authorization works.
interface IChannelDepositCollector {
    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external;
}

/// @title BatchSettlement
/// @notice Payment channels of x402's `batch-settlement` scheme on EVM, with
/// the interface, events and EIP-712 digests of the x402BatchSettlement
/// contract the official x402 packages call at
/// 0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003.
///
/// A payer escrows tokens in a channel (a deposit, pulled by a collector);
/// the receiver side claims cumulative vouchers the payer signed (a claim
/// only moves accounting), then settles: the claimed amounts of a receiver
/// and token go out in one transfer. The payer leaves through a timed
/// withdrawal, or earlier through a cooperative refund the receiver side
/// authorizes.
///
/// A channel is named by its configuration: channelId is the EIP-712 hash of
/// the ChannelConfig under the domain ("x402 Batch Settlement", "1",
/// chainid, this address). The domain separator is computed on each use from
/// address(this) and block.chainid, and the contract has no constructor and
/// no immutables, so its runtime code works unchanged wherever a genesis or
/// a test node places it.
///
/// Compiled for paris (the devchain's EVM has no transient storage), so its
/// reentrancy lock is a storage slot.
contract BatchSettlement {
    using SafeERC20 for IERC20;

    /// @notice A channel's immutable parameters; their EIP-712 hash is its id.
    struct ChannelConfig {
        address payer;
        address payerAuthorizer;
        address receiver;
        address receiverAuthorizer;
        address token;
        uint40 withdrawDelay;
        bytes32 salt;
    }

    /// @notice The escrow of a channel and the cumulative amount claimed from it.
    struct ChannelState {
        uint128 balance;
        uint128 totalClaimed;
    }

    /// @notice A timed withdrawal in progress; initiatedAt is zero when none is.
    struct WithdrawalState {
        uint128 amount;
        uint40 initiatedAt;
    }

    /// @notice What a receiver has claimed in a token and what of it was paid out.
    struct ReceiverState {
        uint128 totalClaimed;
        uint128 totalSettled;
    }

    /// @notice The payer's promise: up to maxClaimableAmount, cumulative, from the channel.
    struct Voucher {
        ChannelConfig channel;
        uint128 maxClaimableAmount;
    }

    /// @notice A signed voucher and the cumulative total the receiver side claims with it.
    struct VoucherClaim {
        Voucher voucher;
        bytes signature;
        uint128 totalClaimed;
    }

    uint40 public constant MIN_WITHDRAW_DELAY = 900;
    uint40 public constant MAX_WITHDRAW_DELAY = 2_592_000;

    bytes32 private constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 private constant NAME_HASH = keccak256("x402 Batch Settlement");
    bytes32 private constant VERSION_HASH = keccak256("1");

    bytes32 public constant CHANNEL_CONFIG_TYPEHASH = keccak256(
        "ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"
    );
    bytes32 public constant VOUCHER_TYPEHASH = keccak256("Voucher(bytes32 channelId,uint128 maxClaimableAmount)");
    bytes32 public constant REFUND_TYPEHASH = keccak256("Refund(bytes32 channelId,uint256 nonce,uint128 amount)");
    bytes32 public constant CLAIM_ENTRY_TYPEHASH =
        keccak256("ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)");
    bytes32 public constant CLAIM_BATCH_TYPEHASH = keccak256(
        "ClaimBatch(ClaimEntry[] claims)ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
    );

    /// @notice Escrow and claimed total by channel.
    mapping(bytes32 channelId => ChannelState) public channels;
    /// @notice The nonce the next signed refund of a channel must carry; every refund advances it.
    mapping(bytes32 channelId => uint256) public refundNonce;
    /// @notice The timed withdrawal of a channel, if one is in progress.
    mapping(bytes32 channelId => WithdrawalState) public pendingWithdrawals;
    /// @notice Claimed and settled totals by receiver and token.
    mapping(address receiver => mapping(address token => ReceiverState)) public receivers;

    /// @dev 1 while an external function runs.
    uint256 private locked;

    event ChannelCreated(bytes32 indexed channelId, ChannelConfig config);
    event ChannelClosed(bytes32 indexed channelId, ChannelConfig config);
    event Deposited(bytes32 indexed channelId, address indexed sender, uint128 amount, uint128 newBalance);
    event Claimed(bytes32 indexed channelId, address indexed sender, uint128 claimAmount, uint128 newTotalClaimed);
    event Settled(address indexed receiver, address indexed token, address indexed sender, uint128 amount);
    event Refunded(bytes32 indexed channelId, address indexed sender, uint128 amount);
    event WithdrawInitiated(bytes32 indexed channelId, uint128 amount, uint40 finalizeAfter);
    event WithdrawFinalized(bytes32 indexed channelId, address indexed sender, uint128 amount);

    error Reentered();
    error InvalidChannel();
    error WithdrawDelayOutOfRange();
    error ZeroDeposit();
    error InvalidCollector();
    error DepositOverflow();
    error DepositCollectionFailed();
    error EmptyBatch();
    error NotAuthorizedToClaim();
    error NotReceiverAuthorizer();
    error InvalidSignature();
    error ClaimExceedsCeiling();
    error ClaimExceedsBalance();
    error NotPayerSide();
    error NothingToWithdraw();
    error WithdrawalAlreadyPending();
    error WithdrawalNotPending();
    error WithdrawAmountExceedsAvailable();
    error WithdrawDelayNotElapsed();
    error NotAuthorizedToRefund();
    error InvalidRefundNonce();
    error ZeroRefund();

    modifier nonReentrant() {
        if (locked == 1) revert Reentered();
        locked = 1;
        _;
        locked = 0;
    }

    // ---------------------------------------------------------------- batching

    /// @notice Runs several calls of this contract in one transaction, each
    /// with the caller as msg.sender; a failing call reverts all of them
    /// with its own revert data.
    function multicall(bytes[] calldata data) external returns (bytes[] memory results) {
        results = new bytes[](data.length);
        for (uint256 i = 0; i < data.length; ++i) {
            (bool ok, bytes memory out) = address(this).delegatecall(data[i]);
            if (!ok) {
                assembly ("memory-safe") {
                    revert(add(out, 32), mload(out))
                }
            }
            results[i] = out;
        }
    }

    // ---------------------------------------------------------------- deposits

    /// @notice Adds amount to the channel of config, pulled from the payer by
    /// collector with collectorData; the contract's own balance of the token
    /// must grow by exactly amount.
    function deposit(ChannelConfig calldata config, uint128 amount, address collector, bytes calldata collectorData)
        external
        nonReentrant
    {
        if (
            config.payer == address(0) || config.receiver == address(0) || config.receiverAuthorizer == address(0)
                || config.token == address(0)
        ) revert InvalidChannel();
        if (config.withdrawDelay < MIN_WITHDRAW_DELAY || config.withdrawDelay > MAX_WITHDRAW_DELAY) {
            revert WithdrawDelayOutOfRange();
        }
        if (amount == 0) revert ZeroDeposit();
        if (collector == address(0)) revert InvalidCollector();

        bytes32 id = getChannelId(config);
        ChannelState storage ch = channels[id];
        uint128 before = ch.balance;
        if (amount > type(uint128).max - before) revert DepositOverflow();
        ch.balance = before + amount;

        IERC20 token = IERC20(config.token);
        uint256 held = token.balanceOf(address(this));
        IChannelDepositCollector(collector).collect(config.payer, config.token, amount, id, collectorData);
        if (token.balanceOf(address(this)) != held + amount) revert DepositCollectionFailed();

        if (before == 0 && ch.totalClaimed == 0) emit ChannelCreated(id, config);
        emit Deposited(id, msg.sender, amount, before + amount);
    }

    // ---------------------------------------------------------------- claims

    /// @notice Claims vouchers; the caller must be the receiver or the
    /// receiver authorizer of every channel claimed.
    function claim(VoucherClaim[] calldata voucherClaims) external nonReentrant {
        if (voucherClaims.length == 0) revert EmptyBatch();
        for (uint256 i = 0; i < voucherClaims.length; ++i) {
            ChannelConfig calldata c = voucherClaims[i].voucher.channel;
            if (msg.sender != c.receiver && msg.sender != c.receiverAuthorizer) revert NotAuthorizedToClaim();
            _claim(voucherClaims[i]);
        }
    }

    /// @notice Claims vouchers of channels sharing one receiver authorizer,
    /// whose signature over getClaimBatchDigest(voucherClaims) authorizes
    /// the batch; anyone may send it.
    function claimWithSignature(VoucherClaim[] calldata voucherClaims, bytes calldata authorizerSignature)
        external
        nonReentrant
    {
        if (voucherClaims.length == 0) revert EmptyBatch();
        address authorizer = voucherClaims[0].voucher.channel.receiverAuthorizer;
        if (!SignatureChecker.isValidSignatureNow(authorizer, getClaimBatchDigest(voucherClaims), authorizerSignature)) {
            revert InvalidSignature();
        }
        for (uint256 i = 0; i < voucherClaims.length; ++i) {
            if (voucherClaims[i].voucher.channel.receiverAuthorizer != authorizer) revert NotReceiverAuthorizer();
            _claim(voucherClaims[i]);
        }
    }

    /// @dev Raises the channel's claimed total to vc.totalClaimed, within the
    /// voucher's ceiling and the channel's escrow, once the payer's voucher
    /// signature is checked; a total at or below the recorded one changes
    /// nothing (a voucher claimed again is harmless).
    function _claim(VoucherClaim calldata vc) private {
        bytes32 id = getChannelId(vc.voucher.channel);
        ChannelState storage ch = channels[id];
        uint128 previous = ch.totalClaimed;
        uint128 total = vc.totalClaimed;
        if (total <= previous) return;
        if (total > vc.voucher.maxClaimableAmount) revert ClaimExceedsCeiling();
        if (total > ch.balance) revert ClaimExceedsBalance();
        if (!_voucherSigned(vc.voucher.channel, getVoucherDigest(id, vc.voucher.maxClaimableAmount), vc.signature)) {
            revert InvalidSignature();
        }
        ch.totalClaimed = total;
        uint128 delta = total - previous;
        receivers[vc.voucher.channel.receiver][vc.voucher.channel.token].totalClaimed += delta;
        emit Claimed(id, msg.sender, delta, total);
    }

    /// @dev A voucher is signed by the payer authorizer's key (ECDSA only)
    /// or, when there is none, by the payer (ECDSA or EIP-1271).
    function _voucherSigned(ChannelConfig calldata c, bytes32 digest, bytes calldata signature)
        private
        view
        returns (bool)
    {
        if (c.payerAuthorizer != address(0)) {
            (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecover(digest, signature);
            return err == ECDSA.RecoverError.NoError && signer == c.payerAuthorizer;
        }
        return SignatureChecker.isValidSignatureNow(c.payer, digest, signature);
    }

    /// @notice Pays receiver what it claimed in token and was not paid yet,
    /// in one transfer; anyone may call it.
    function settle(address receiver, address token) external nonReentrant {
        ReceiverState storage rs = receivers[receiver][token];
        uint128 amount = rs.totalClaimed - rs.totalSettled;
        if (amount == 0) return;
        rs.totalSettled = rs.totalClaimed;
        IERC20(token).safeTransfer(receiver, amount);
        emit Settled(receiver, token, msg.sender, amount);
    }

    // ---------------------------------------------------------------- payer's exit

    /// @notice Starts a timed withdrawal of amount (at most the unclaimed
    /// escrow) by the payer or its authorizer; the receiver side may still
    /// claim until it is finalized.
    function initiateWithdraw(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        if (msg.sender != config.payer && msg.sender != config.payerAuthorizer) revert NotPayerSide();
        if (amount == 0) revert NothingToWithdraw();
        bytes32 id = getChannelId(config);
        WithdrawalState storage ws = pendingWithdrawals[id];
        if (ws.initiatedAt != 0) revert WithdrawalAlreadyPending();
        ChannelState storage ch = channels[id];
        if (amount > ch.balance - ch.totalClaimed) revert WithdrawAmountExceedsAvailable();
        uint40 now40 = uint40(block.timestamp);
        ws.amount = amount;
        ws.initiatedAt = now40;
        emit WithdrawInitiated(id, amount, now40 + config.withdrawDelay);
    }

    /// @notice Ends a timed withdrawal once its delay has passed: the payer
    /// gets the amount asked, or the unclaimed escrow left if less.
    function finalizeWithdraw(ChannelConfig calldata config) external nonReentrant {
        if (msg.sender != config.payer && msg.sender != config.payerAuthorizer) revert NotPayerSide();
        bytes32 id = getChannelId(config);
        WithdrawalState storage ws = pendingWithdrawals[id];
        uint40 initiatedAt = ws.initiatedAt;
        if (initiatedAt == 0) revert WithdrawalNotPending();
        if (block.timestamp < uint256(initiatedAt) + config.withdrawDelay) revert WithdrawDelayNotElapsed();
        ChannelState storage ch = channels[id];
        uint128 available = ch.balance - ch.totalClaimed;
        uint128 amount = ws.amount < available ? ws.amount : available;
        delete pendingWithdrawals[id];
        ch.balance -= amount;
        emit WithdrawFinalized(id, msg.sender, amount);
        if (ch.balance == 0 && ch.totalClaimed == 0) emit ChannelClosed(id, config);
        if (amount > 0) IERC20(config.token).safeTransfer(config.payer, amount);
    }

    /// @notice Returns up to amount of the unclaimed escrow to the payer,
    /// called by the receiver or the receiver authorizer.
    function refund(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        if (msg.sender != config.receiver && msg.sender != config.receiverAuthorizer) revert NotAuthorizedToRefund();
        _refund(config, amount);
    }

    /// @notice Returns up to amount of the unclaimed escrow to the payer on
    /// the receiver authorizer's signature over getRefundDigest(channelId,
    /// nonce, amount); nonce must be the channel's refundNonce. Anyone may
    /// send it.
    function refundWithSignature(
        ChannelConfig calldata config,
        uint128 amount,
        uint256 nonce,
        bytes calldata receiverAuthorizerSignature
    ) external nonReentrant {
        bytes32 id = getChannelId(config);
        if (nonce != refundNonce[id]) revert InvalidRefundNonce();
        if (
            !SignatureChecker.isValidSignatureNow(
                config.receiverAuthorizer, getRefundDigest(id, nonce, amount), receiverAuthorizerSignature
            )
        ) revert InvalidSignature();
        _refund(config, amount);
    }

    /// @dev Advances the channel's refund nonce, then pays back up to amount
    /// of the unclaimed escrow; a pending timed withdrawal shrinks by what
    /// was paid back (and ends if covered).
    function _refund(ChannelConfig calldata config, uint128 amount) private {
        if (amount == 0) revert ZeroRefund();
        bytes32 id = getChannelId(config);
        refundNonce[id] += 1;
        ChannelState storage ch = channels[id];
        uint128 available = ch.balance - ch.totalClaimed;
        uint128 paid = amount < available ? amount : available;
        if (paid == 0) return;
        ch.balance -= paid;
        WithdrawalState storage ws = pendingWithdrawals[id];
        if (ws.initiatedAt != 0) {
            if (paid >= ws.amount) delete pendingWithdrawals[id];
            else ws.amount -= paid;
        }
        emit Refunded(id, msg.sender, paid);
        if (ch.balance == 0 && ch.totalClaimed == 0) emit ChannelClosed(id, config);
        IERC20(config.token).safeTransfer(config.payer, paid);
    }

    // ---------------------------------------------------------------- EIP-712

    /// @notice The EIP-712 domain separator: ("x402 Batch Settlement", "1",
    /// block.chainid, this address).
    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(abi.encode(DOMAIN_TYPEHASH, NAME_HASH, VERSION_HASH, block.chainid, address(this)));
    }

    function _typedDigest(bytes32 structHash) private view returns (bytes32 digest) {
        bytes32 separator = DOMAIN_SEPARATOR();
        assembly ("memory-safe") {
            let p := mload(0x40)
            mstore(p, hex"1901")
            mstore(add(p, 2), separator)
            mstore(add(p, 34), structHash)
            digest := keccak256(p, 66)
        }
    }

    /// @notice The id of the channel of config: its EIP-712 typed-data hash.
    function getChannelId(ChannelConfig calldata config) public view returns (bytes32) {
        return _typedDigest(keccak256(abi.encode(CHANNEL_CONFIG_TYPEHASH, config)));
    }

    /// @notice The digest a payer signs for a voucher.
    function getVoucherDigest(bytes32 channelId, uint128 maxClaimableAmount) public view returns (bytes32) {
        return _typedDigest(keccak256(abi.encode(VOUCHER_TYPEHASH, channelId, maxClaimableAmount)));
    }

    /// @notice The digest a receiver authorizer signs for a refund.
    function getRefundDigest(bytes32 channelId, uint256 nonce, uint128 amount) public view returns (bytes32) {
        return _typedDigest(keccak256(abi.encode(REFUND_TYPEHASH, channelId, nonce, amount)));
    }

    /// @notice The digest a receiver authorizer signs for a batch of claims
    /// (ClaimBatch of one ClaimEntry per row, in order).
    function getClaimBatchDigest(VoucherClaim[] calldata voucherClaims) public view returns (bytes32) {
        bytes32[] memory entries = new bytes32[](voucherClaims.length);
        for (uint256 i = 0; i < voucherClaims.length; ++i) {
            entries[i] = keccak256(
                abi.encode(
                    CLAIM_ENTRY_TYPEHASH,
                    getChannelId(voucherClaims[i].voucher.channel),
                    voucherClaims[i].voucher.maxClaimableAmount,
                    voucherClaims[i].totalClaimed
                )
            );
        }
        return _typedDigest(keccak256(abi.encode(CLAIM_BATCH_TYPEHASH, keccak256(abi.encodePacked(entries)))));
    }
}
