// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";

/// @notice The EIP-3009 call the collector makes (the variant taking the
/// signature as bytes, which Circle's FiatTokenV2_2 and DevUSDC have).
interface IReceiveWithAuthorization {
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external;
}

/// @title ERC3009DepositCollector
/// @notice Pulls a channel deposit with the payer's EIP-3009
/// receiveWithAuthorization and hands it to the batch settlement contract,
/// with the interface of the collector the official x402 packages name at
/// 0x4020806089470a89826cB9fB1f4059150b550004.
///
/// receiveWithAuthorization pays only its caller, so the tokens come here
/// first. The authorization's nonce is keccak256(abi.encode(channelId,
/// salt)): the payer's signature binds the deposit to one channel. Only the
/// settlement contract at the canonical address may call collect, so that
/// nobody else can spend an authorization seen in a mempool. The address is
/// a constant (no constructor, no immutables): the runtime code is placed
/// as it is, beside BatchSettlement at its own canonical address.
contract ERC3009DepositCollector {
    using SafeERC20 for IERC20;

    /// @notice The only caller of collect: BatchSettlement's canonical address.
    address public constant x402BatchSettlement = 0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003;

    error OnlyX402BatchSettlement();

    /// @notice Moves amount of token from payer to the settlement contract.
    /// collectorData is abi.encode(validAfter, validBefore, salt, signature)
    /// of the payer's ReceiveWithAuthorization to this contract.
    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external
    {
        if (msg.sender != x402BatchSettlement) revert OnlyX402BatchSettlement();
        (uint256 validAfter, uint256 validBefore, uint256 salt, bytes memory signature) =
            abi.decode(collectorData, (uint256, uint256, uint256, bytes));
        IReceiveWithAuthorization(token).receiveWithAuthorization(
            payer, address(this), amount, validAfter, validBefore, keccak256(abi.encode(channelId, salt)), signature
        );
        IERC20(token).safeTransfer(x402BatchSettlement, amount);
    }
}
