// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {DevWallet} from "./DevWallet.sol";

/// @title DevWalletFactory
/// @notice Deploys DevWallets at counterfactual addresses (CREATE2), as the
/// factories of smart-account wallets do: a wallet's address is known, and
/// can receive and sign for payments (ERC-6492), before it is deployed.
contract DevWalletFactory {
    event Deployed(address indexed wallet, address indexed owner, bytes32 salt);

    /// @notice Deploys the wallet of owner and salt, or returns it when it is
    /// deployed already.
    function deploy(address owner, bytes32 salt) external returns (address wallet) {
        wallet = addressOf(owner, salt);
        if (wallet.code.length > 0) {
            return wallet;
        }
        wallet = address(new DevWallet{salt: salt}(owner));
        emit Deployed(wallet, owner, salt);
    }

    /// @notice The address the wallet of owner and salt has, deployed or not.
    function addressOf(address owner, bytes32 salt) public view returns (address) {
        bytes32 code = keccak256(abi.encodePacked(type(DevWallet).creationCode, abi.encode(owner)));
        return address(uint160(uint256(keccak256(abi.encodePacked(bytes1(0xff), address(this), salt, code)))));
    }
}
