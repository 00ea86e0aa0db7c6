// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IERC1271} from "@openzeppelin/contracts/interfaces/IERC1271.sol";

/// @title DevBurnerWallet
/// @notice A hostile EIP-1271 contract wallet for tests of the relayer's
/// bounds on payer code: its isValidSignature burns gas (rounds of
/// keccak256) and then accepts any signature, or, while gasless is set,
/// only a call made at a gas price of zero (an eth_call without a price,
/// never a mined transaction).
contract DevBurnerWallet is IERC1271 {
    /// @notice The rounds of hashing each isValidSignature runs.
    uint256 public immutable rounds;
    /// @notice Whether signatures are accepted only at a gas price of zero.
    bool public gasless;

    constructor(uint256 rounds_, bool gasless_) {
        rounds = rounds_;
        gasless = gasless_;
    }

    /// @notice Sets gasless, for anyone: the attacker flips it between a
    /// settlement's simulation and its transaction.
    function setGasless(bool gasless_) external {
        gasless = gasless_;
    }

    function isValidSignature(bytes32 hash, bytes memory) external view returns (bytes4) {
        bytes32 h = hash;
        for (uint256 i = 0; i < rounds; i++) {
            h = keccak256(abi.encodePacked(h, i));
        }
        if (h == bytes32(0) || (gasless && tx.gasprice != 0)) {
            return 0xffffffff;
        }
        return IERC1271.isValidSignature.selector;
    }
}
