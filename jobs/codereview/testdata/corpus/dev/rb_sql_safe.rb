class UsersController < ApplicationController
  def search
    @users = User.where("name = ?", params[:name])
    @admins = User.where(role: "admin")
    flash[:notice] = "Select a user from #{@users.size} results"
  end
end
